/*
 * The `key1=value1,key2=value2` list of OpenTelemetry's environment
 * variables OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES (the
 * W3C Baggage format without properties).
 *
 * Grammar, applied to exactly len bytes (a NUL inside them is an error):
 *
 *   list   = member *( "," member )
 *   member = OWS key OWS "=" OWS value OWS   ; OWS: spaces and tabs
 *          | OWS                             ; empty member, skipped
 *
 * - key: one or more printable ASCII characters (0x21-0x7E) other than ','
 *   and '='. Keys are taken as written: no percent-decoding, no case
 *   folding.
 * - value: everything after the first '=' up to the next ',', trimmed;
 *   it may be empty and may contain '=' (base64 tokens do). It is
 *   percent-decoded with sp_percent_decode. Before decoding it must hold no
 *   control character other than tab (0x00-0x08, 0x0A-0x1F, 0x7F); after
 *   decoding it must hold no NUL, so every value is a proper C string.
 *   Bytes 0x80-0xFF are kept as they are. A ';' is an ordinary character:
 *   Baggage properties are not supported by OpenTelemetry here.
 * - Empty members (",,", a leading or trailing ',', only blanks) are
 *   skipped, as the OpenTelemetry SDKs do, so "" and "  " are valid empty
 *   lists.
 * - As the OpenTelemetry specification asks, one invalid member (no '=',
 *   empty or bad key, bad percent escape, control character) makes the
 *   whole list invalid: nothing of it is used.
 * - Duplicate keys are kept, in order; sp_kvlist_find returns the last.
 */
#ifndef SP_KVLIST_H
#define SP_KVLIST_H

#include "sp_common.h"

typedef struct sp_kvlist sp_kvlist;

/*
 * Parses s[0..len) into a new list (s may be NULL when len is 0).
 * SP_ERR_INVALID if the list breaks the grammar above, SP_ERR_NOMEM.
 * *out is set only on SP_OK; free it with sp_kvlist_destroy.
 */
SP_API sp_status sp_kvlist_parse(const char *s, size_t len, sp_kvlist **out);

/*
 * SP_OK if sp_kvlist_parse would accept s[0..len), else SP_ERR_INVALID.
 * Allocates nothing, for the configuration's checks.
 */
SP_API sp_status sp_kvlist_validate(const char *s, size_t len);

/* NULL is accepted and ignored. */
SP_API void sp_kvlist_destroy(sp_kvlist *list);

/* The number of members, empty ones not counted. */
SP_API size_t sp_kvlist_count(const sp_kvlist *list);

/*
 * The i-th member's key and decoded value, NUL-terminated, owned by the
 * list; NULL if i >= count.
 */
SP_API const char *sp_kvlist_key(const sp_kvlist *list, size_t i);
SP_API const char *sp_kvlist_value(const sp_kvlist *list, size_t i);

/* The value of the last member whose key equals key, or NULL. */
SP_API const char *sp_kvlist_find(const sp_kvlist *list, const char *key);

#endif
