/*
 * OTLP/JSON from serialized OTLP requests: the request is decoded with the
 * protobuf-c code generated from proto/ and its message descriptors are
 * walked, so every field the builders write appears without a hand-kept
 * list of them.
 */
#include "sp_otlp_json.h"

#include <stdio.h>
#include <string.h>

#include "opentelemetry/proto/collector/logs/v1/logs_service.pb-c.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"

static void sp_json_message(sp_buf *out, const ProtobufCMessage *m);

static void
sp_json_puts(sp_buf *out, const char *s)
{
    sp_buf_append(out, s, strlen(s));
}

static void
sp_json_string(sp_buf *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t i, run = 0;

    sp_buf_append(out, "\"", 1);
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char          esc[6] = { '\\', 'u', '0', '0', 0, 0 };

        if (c >= 0x20 && c != '"' && c != '\\') {
            continue;
        }
        sp_buf_append(out, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"':  sp_json_puts(out, "\\\""); break;
        case '\\': sp_json_puts(out, "\\\\"); break;
        case '\n': sp_json_puts(out, "\\n"); break;
        case '\r': sp_json_puts(out, "\\r"); break;
        case '\t': sp_json_puts(out, "\\t"); break;
        default:
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            sp_buf_append(out, esc, 6);
        }
    }
    sp_buf_append(out, s + run, len - run);
    sp_buf_append(out, "\"", 1);
}

/* trace_id -> "traceId". */
static void
sp_json_key(sp_buf *out, const char *name)
{
    char   key[128];
    size_t n = 0;
    bool   up = false;

    for (; *name != '\0' && n < sizeof(key) - 1; name++) {
        if (*name == '_') {
            up = true;
            continue;
        }
        key[n++] = up && *name >= 'a' && *name <= 'z'
                   ? (char)(*name - 'a' + 'A') : *name;
        up = false;
    }
    sp_json_string(out, key, n);
    sp_buf_append(out, ":", 1);
}

static bool
sp_json_is_id(const char *name)
{
    size_t n = strlen(name);

    return n >= 3 && strcmp(name + n - 3, "_id") == 0;
}

static void
sp_json_bytes(sp_buf *out, const ProtobufCFieldDescriptor *f,
              const ProtobufCBinaryData *b)
{
    static const char hex[] = "0123456789abcdef";
    size_t i;

    sp_buf_append(out, "\"", 1);
    if (sp_json_is_id(f->name)) {
        for (i = 0; i < b->len; i++) {
            char two[2] = { hex[b->data[i] >> 4], hex[b->data[i] & 15] };
            sp_buf_append(out, two, 2);
        }
    } else {
        sp_base64_encode(out, b->data, b->len);
    }
    sp_buf_append(out, "\"", 1);
}

/* One value of field f at p. */
static void
sp_json_value(sp_buf *out, const ProtobufCFieldDescriptor *f, const void *p)
{
    char num[40];

    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        snprintf(num, sizeof(num), "%d", *(const int32_t *)p);
        sp_json_puts(out, num);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        snprintf(num, sizeof(num), "%u", *(const uint32_t *)p);
        sp_json_puts(out, num);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        snprintf(num, sizeof(num), "\"%lld\"",
                 (long long)*(const int64_t *)p);
        sp_json_puts(out, num);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        snprintf(num, sizeof(num), "\"%llu\"",
                 (unsigned long long)*(const uint64_t *)p);
        sp_json_puts(out, num);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        snprintf(num, sizeof(num), "%.9g", (double)*(const float *)p);
        sp_json_puts(out, num);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        snprintf(num, sizeof(num), "%.17g", *(const double *)p);
        sp_json_puts(out, num);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        sp_json_puts(out, *(const protobuf_c_boolean *)p ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        sp_json_string(out, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES:
        sp_json_bytes(out, f, (const ProtobufCBinaryData *)p);
        break;
    case PROTOBUF_C_TYPE_MESSAGE:
        sp_json_message(out, *(ProtobufCMessage *const *)p);
        break;
    }
}

static size_t
sp_json_type_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default:
        return 4;
    }
}

/* proto3: a singular field holding its default is not written. */
static bool
sp_json_is_default(const ProtobufCFieldDescriptor *f, const void *p)
{
    static const uint8_t zero[8];

    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return s == NULL || s[0] == '\0';
    }
    case PROTOBUF_C_TYPE_BYTES:
        return ((const ProtobufCBinaryData *)p)->len == 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return *(void *const *)p == NULL;
    default:
        return memcmp(p, zero, sp_json_type_size(f->type)) == 0;
    }
}

static void
sp_json_message(sp_buf *out, const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    bool        first = true;
    unsigned    i;

    sp_buf_append(out, "{", 1);
    for (i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *p = base + f->offset;

        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t      n = *(const size_t *)(base + f->quantifier_offset);
            const char *arr = *(char *const *)p;
            size_t      j, sz = sp_json_type_size(f->type);

            if (n == 0) {
                continue;
            }
            if (!first) {
                sp_buf_append(out, ",", 1);
            }
            first = false;
            sp_json_key(out, f->name);
            sp_buf_append(out, "[", 1);
            for (j = 0; j < n; j++) {
                if (j > 0) {
                    sp_buf_append(out, ",", 1);
                }
                sp_json_value(out, f, arr + j * sz);
            }
            sp_buf_append(out, "]", 1);
            continue;
        }
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id) {
                continue;
            }
        } else if (sp_json_is_default(f, p)) {
            continue;
        }
        if (!first) {
            sp_buf_append(out, ",", 1);
        }
        first = false;
        sp_json_key(out, f->name);
        sp_json_value(out, f, p);
    }
    sp_buf_append(out, "}", 1);
}

sp_status
sp_otlp_json_append(sp_buf *out, sp_otlp_signal signal, const void *bytes,
                    size_t len)
{
    const ProtobufCMessageDescriptor *d;
    ProtobufCMessage *m;
    size_t            mark = out->len;
    sp_status         st;

    if (signal == SP_OTLP_SIGNAL_LOGS) {
        d = &opentelemetry__proto__collector__logs__v1__export_logs_service_request__descriptor;
    } else if (signal == SP_OTLP_SIGNAL_TRACES) {
        d = &opentelemetry__proto__collector__trace__v1__export_trace_service_request__descriptor;
    } else {
        return SP_ERR_INVALID;
    }
    m = protobuf_c_message_unpack(d, NULL, len, bytes);
    if (m == NULL) {
        return SP_ERR_INVALID;
    }
    sp_json_message(out, m);
    sp_buf_append(out, "\n", 1);
    protobuf_c_message_free_unpacked(m, NULL);
    st = sp_buf_status(out);
    if (st != SP_OK) {
        sp_buf_truncate(out, mark);
        out->err = st;
    }
    return st;
}
