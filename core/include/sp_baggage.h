/*
 * W3C Baggage: the `baggage` request header, parsed into a caller-allocated
 * sp_baggage, changed, and serialized for the requests the server forwards.
 *
 * Followed: the W3C Baggage header format (w3c/baggage,
 * baggage/HTTP_HEADER_FORMAT.md, and https://www.w3.org/TR/baggage/):
 *
 *   baggage-string = list-member 0*179( OWS "," OWS list-member )
 *   list-member    = key OWS "=" OWS value *( OWS ";" OWS property )
 *   property       = key OWS "=" OWS value / key OWS
 *   key            = token                  ; RFC 7230 section 3.2.6
 *   value          = *baggage-octet         ; percent-encoded UTF-8
 *   baggage-octet  = %x21 / %x23-2B / %x2D-3A / %x3C-5B / %x5D-7E
 *   OWS            = *( SP / HTAB )
 *
 * and its limits: at most 180 list-members and 8192 bytes of
 * baggage-string. (One edition also capped a list-member at 4096 bytes;
 * the current text does not, nor does this.) Which members to drop is the
 * implementation's choice there; here it is always the last ones. OWS is
 * accepted and never reproduced; keys, values and properties are kept byte
 * for byte as received (values stay percent-encoded), so what is not ours
 * propagates unchanged.
 *
 * No function allocates. sizeof(sp_baggage) is 9656 bytes on LP64 (180
 * member slots of 8 bytes and an 8192-byte text buffer): keep one per
 * request in the request's pool, not on a small stack.
 */
#ifndef SP_BAGGAGE_H
#define SP_BAGGAGE_H

#include "sp_common.h"

#define SP_BAGGAGE_MAX_MEMBERS 180
#define SP_BAGGAGE_MAX_BYTES   8192
/* An output buffer this large always holds sp_baggage_serialize's result. */
#define SP_BAGGAGE_SERIALIZE_CAP (SP_BAGGAGE_MAX_BYTES + 1)

/* Where one member's text lies in sp_baggage.text; private to the core. */
typedef struct sp_baggage_slot {
    uint16_t off;
    uint16_t len;       /* of "key=value[;properties]" */
    uint16_t key_len;
    uint16_t value_len;
} sp_baggage_slot;

/*
 * The members in order. The fields are private: use the functions. Each
 * member's text is stored in its serialized form "key=value[;props]", one
 * after the other, so text never needs more than SP_BAGGAGE_MAX_BYTES.
 */
typedef struct sp_baggage {
    size_t count;
    size_t used;        /* bytes of text in use */
    bool truncated;     /* a parse hit a limit: later members are dropped */
    sp_baggage_slot slots[SP_BAGGAGE_MAX_MEMBERS];
    char text[SP_BAGGAGE_MAX_BYTES];
} sp_baggage;

/* What one sp_baggage_parse call did with the list-members it met. */
typedef struct sp_baggage_counts {
    size_t kept;
    size_t dropped_malformed;   /* not following the grammar */
    size_t dropped_limit;       /* well-formed, past 180 members or 8192 B */
} sp_baggage_counts;

/*
 * One member, pointing into the sp_baggage: valid until the next call that
 * changes it. value is as received (percent-encoded). properties is the
 * text after the first ';' with OWS removed, e.g. "p1;p2=v2", or empty.
 */
typedef struct sp_baggage_entry {
    const char *key;
    size_t key_len;
    const char *value;
    size_t value_len;
    const char *properties;
    size_t properties_len;
} sp_baggage_entry;

/* Empties b. Also the reset between requests. */
SP_API void sp_baggage_init(sp_baggage *b);

/*
 * Adds the list-members of one baggage header value to b, in order.
 * Parsing each header line of a request in turn gives the same result as
 * parsing the lines joined with ",": the adapter may do either.
 *
 * A malformed list-member (bad key, a byte that is not a baggage-octet, a
 * '%' not followed by two hex digits, no '=', an empty property) is dropped
 * alone. Empty list-members ("a=1,,b=2", a trailing ",") are skipped and
 * not counted, as RFC 7230 section 7 asks of list headers. The first
 * well-formed member that would make b exceed 180 members or 8192 serialized
 * bytes is dropped, and so is every well-formed member after it, also in
 * later calls until sp_baggage_init: b keeps the longest prefix of whole
 * members that fits. counts may be NULL.
 */
SP_API void sp_baggage_parse(sp_baggage *b, const char *header, size_t len,
    sp_baggage_counts *counts);

SP_API size_t sp_baggage_count(const sp_baggage *b);

/* Member i (0-based) into *e; SP_ERR_NOT_FOUND when i >= count. */
SP_API sp_status sp_baggage_entry_at(const sp_baggage *b, size_t i,
    sp_baggage_entry *e);

/*
 * The value of the last member whose key is exactly key (keys are
 * case-sensitive; the last, as OpenTelemetry's propagators read a key
 * given twice), percent-decoded into out (not NUL-terminated). Byte
 * sequences that are not UTF-8 come out as U+FFFD, as the Baggage spec
 * requires of decoders. SP_ERR_NOT_FOUND when no member has that key,
 * SP_ERR_TOO_LONG when out is too small: the value's encoded length always
 * suffices (a U+FFFD's 3 bytes replace at least one 3-byte escape).
 */
SP_API sp_status sp_baggage_get(const sp_baggage *b, const char *key,
    char *out, size_t cap, size_t *out_len);

/*
 * Gives key the raw (already percent-encoded) value: the first member with
 * that key becomes "key=value" in place, losing its properties, and later
 * members with the same key are removed; with no such member, "key=value"
 * is appended. If b would then exceed 180 members or 8192 serialized bytes,
 * members are dropped from the end, never the one being set: whoever sets
 * an entry needs it downstream (the snapshot volume, SPEC section 3), and
 * the end is what parsing drops first too. *evicted (may be NULL) gets how
 * many were dropped. SP_ERR_INVALID for a key that is not a token or a value
 * that is not baggage-octets with valid escapes, SP_ERR_TOO_LONG when
 * "key=value" alone exceeds 8192 bytes; b is then unchanged. key and value
 * are NUL-terminated and must not point into b.
 */
SP_API sp_status sp_baggage_set(sp_baggage *b, const char *key,
    const char *value, size_t *evicted);

/* The length sp_baggage_serialize would produce, at most 8192. */
SP_API size_t sp_baggage_serialized_len(const sp_baggage *b);

/*
 * Writes "k=v;prop,k2=v2" with no whitespace and a terminating NUL into
 * out; *out_len gets the length without the NUL. SP_ERR_TOO_LONG if cap
 * cannot hold both (SP_BAGGAGE_SERIALIZE_CAP always can). An empty b gives
 * "": send no baggage header then.
 */
SP_API sp_status sp_baggage_serialize(const sp_baggage *b, char *out,
    size_t cap, size_t *out_len);

#endif
