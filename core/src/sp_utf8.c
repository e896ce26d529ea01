#include <string.h>

#include "sp_utf8.h"

static const uint8_t sp_fffd[3] = { 0xEF, 0xBF, 0xBD };

/* Length of the UTF-8 sequence starting at s[0] if it is valid, else 0. */
static size_t
sp_utf8_seq(const uint8_t *s, size_t len)
{
    uint8_t c = s[0];

    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        return len >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (len < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) {
            return 0;
        }
        /* Overlong (E0 80..9F) and surrogates (ED A0..BF). */
        if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F)) {
            return 0;
        }
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (len < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80
            || (s[3] & 0xC0) != 0x80)
        {
            return 0;
        }
        /* Overlong (F0 80..8F) and past U+10FFFF (F4 90..BF). */
        if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F)) {
            return 0;
        }
        return 4;
    }
    return 0;
}

/*
 * How many bytes an invalid sequence at s[0] spans: the lead byte and the
 * continuation bytes that could still have belonged to it (the "maximal
 * subpart" of Unicode's U+FFFD substitution practice), at least one.
 */
static size_t
sp_utf8_bad(const uint8_t *s, size_t len)
{
    uint8_t c = s[0];
    size_t  want, n;
    uint8_t lo = 0x80, hi = 0xBF;

    if (c >= 0xC2 && c <= 0xDF) {
        want = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        want = 3;
        if (c == 0xE0) {
            lo = 0xA0;
        } else if (c == 0xED) {
            hi = 0x9F;
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        want = 4;
        if (c == 0xF0) {
            lo = 0x90;
        } else if (c == 0xF4) {
            hi = 0x8F;
        }
    } else {
        return 1;
    }
    for (n = 1; n < want && n < len; n++) {
        if (s[n] < lo || s[n] > hi) {
            break;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    return n;
}

bool
sp_utf8_valid(const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t         i = 0, n;
    uint64_t       w;

    while (i < len) {
        /* Eight ASCII bytes at a time: most attribute values are ASCII. */
        if (len - i >= 8) {
            memcpy(&w, p + i, 8);
            if ((w & 0x8080808080808080ull) == 0) {
                i += 8;
                continue;
            }
        } else if (len >= 8) {
            /* A short tail: the last eight bytes at once, overlapping
             * what is already known valid, instead of a byte loop. */
            memcpy(&w, p + len - 8, 8);
            if ((w & 0x8080808080808080ull) == 0) {
                return true;
            }
        }
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        n = sp_utf8_seq(p + i, len - i);
        if (n == 0) {
            return false;
        }
        i += n;
    }
    return true;
}

/* One walk for both: counts, and writes when dst is not NULL. */
static size_t
sp_utf8_walk(uint8_t *dst, const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t         i = 0, start = 0, out = 0, n;

    while (i < len) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        n = sp_utf8_seq(p + i, len - i);
        if (n != 0) {
            i += n;
            continue;
        }
        if (dst != NULL) {
            memcpy(dst + out, p + start, i - start);
            memcpy(dst + out + (i - start), sp_fffd, sizeof(sp_fffd));
        }
        out += i - start + sizeof(sp_fffd);
        i += sp_utf8_bad(p + i, len - i);
        start = i;
    }
    if (dst != NULL && len > start) {
        memcpy(dst + out, p + start, len - start);
    }
    return out + (len - start);
}

size_t
sp_utf8_repaired_len(const char *s, size_t len)
{
    if (len == 0 || sp_utf8_valid(s, len)) {
        return len;
    }
    return sp_utf8_walk(NULL, s, len);
}

size_t
sp_utf8_repair(void *dst, const char *s, size_t len)
{
    if (len == 0 || sp_utf8_valid(s, len)) {
        if (len > 0) {
            memcpy(dst, s, len);
        }
        return len;
    }
    return sp_utf8_walk(dst, s, len);
}
