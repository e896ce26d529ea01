/*
 * A JSON reader (RFC 8259) for spanprof-dump: one text, such as one line
 * of OTLP/JSON, parsed into a read-only tree.
 *
 * EXPORTER SIDE ONLY (heap). The input is untrusted: the grammar is
 * followed strictly (no comments, no trailing commas, no leading zeros,
 * no control characters or invalid UTF-8 in strings, no lone surrogates,
 * nothing after the value but whitespace), nesting is bounded, and the
 * memory taken is proportional to the input's length.
 *
 * Strings are kept decoded (escapes resolved) and NUL-terminated; a
 * string holding \u0000 has its true length from sp_json_string. Numbers
 * are kept as their text; sp_json_int64 converts the ones that are
 * integers, and also accepts a string of decimal digits (how OTLP/JSON
 * writes 64-bit integers).
 */
#ifndef SP_JSON_H
#define SP_JSON_H

#include "sp_common.h"

#define SP_JSON_MAX_DEPTH 64

typedef enum sp_json_type {
    SP_JSON_NULL = 0,
    SP_JSON_FALSE,
    SP_JSON_TRUE,
    SP_JSON_NUMBER,
    SP_JSON_STRING,
    SP_JSON_ARRAY,
    SP_JSON_OBJECT
} sp_json_type;

typedef struct sp_json sp_json;             /* a parsed document */
typedef struct sp_json_value sp_json_value; /* a value inside one */

/*
 * Parses text[0..len) (need not be NUL-terminated). SP_OK and *out;
 * SP_ERR_INVALID (not one JSON value, or nested deeper than
 * SP_JSON_MAX_DEPTH); SP_ERR_NOMEM. *out is NULL on failure.
 */
SP_API sp_status sp_json_parse(const char *text, size_t len, sp_json **out);

/* NULL is fine. Every value of the document goes with it. */
SP_API void sp_json_destroy(sp_json *doc);

SP_API const sp_json_value *sp_json_root(const sp_json *doc);

/* A NULL value is of type SP_JSON_NULL, so lookups chain safely. */
SP_API sp_json_type sp_json_type_of(const sp_json_value *v);

/* The member named key of an object (the last one when repeated); NULL
   when v is not an object or has no such member. */
SP_API const sp_json_value *sp_json_get(const sp_json_value *v,
                                        const char *key);

/*
 * Iteration over an array's elements or an object's members, in order:
 * for (e = sp_json_first(v); e; e = sp_json_next(e)). NULL when v is
 * neither or is empty. For members, sp_json_key names the member.
 */
SP_API const sp_json_value *sp_json_first(const sp_json_value *v);
SP_API const sp_json_value *sp_json_next(const sp_json_value *v);
SP_API const char *sp_json_key(const sp_json_value *member);

/* Elements or members; 0 for other types. */
SP_API size_t sp_json_count(const sp_json_value *v);

/* A string's decoded bytes, NUL-terminated, and its length (len may be
   NULL); NULL when v is not a string. */
SP_API const char *sp_json_string(const sp_json_value *v, size_t *len);

/*
 * An integer: a number without fraction or exponent, or a string of an
 * optional '-' and decimal digits, within int64_t. SP_OK; SP_ERR_INVALID
 * for anything else (*out untouched).
 */
SP_API sp_status sp_json_int64(const sp_json_value *v, int64_t *out);

#endif
