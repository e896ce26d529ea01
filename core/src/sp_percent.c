#include "sp_percent.h"

int
sp_hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

sp_status
sp_percent_decode(const char *in, size_t len, char *out, size_t cap,
                  size_t *out_len)
{
    size_t i = 0, n = 0;

    while (i < len) {
        char c = in[i];

        if (c == '%') {
            int hi, lo;

            if (len - i < 3) {
                return SP_ERR_INVALID;
            }
            hi = sp_hex_value(in[i + 1]);
            lo = sp_hex_value(in[i + 2]);
            if (hi < 0 || lo < 0) {
                return SP_ERR_INVALID;
            }
            c = (char)(hi << 4 | lo);
            i += 3;
        } else {
            i++;
        }
        if (n == cap) {
            return SP_ERR_TOO_LONG;
        }
        out[n++] = c;
    }
    *out_len = n;
    return SP_OK;
}
