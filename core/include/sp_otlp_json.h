/*
 * The console exporter's encoding: an ExportLogsServiceRequest or
 * ExportTraceServiceRequest (as sp_otlp.h serializes them) rewritten as
 * one line of OTLP/JSON (the OTLP specification's JSON encoding): field
 * names in lowerCamelCase, trace and span ids as lowercase hex, other
 * bytes as base64, enums as numbers, 64-bit integers as decimal strings,
 * fields holding their default value left out.
 *
 * EXPORTER PROCESS ONLY (protobuf-c, heap).
 */
#ifndef SP_OTLP_JSON_H
#define SP_OTLP_JSON_H

#include "sp_common.h"
#include "sp_encode.h"

typedef enum sp_otlp_signal {
    SP_OTLP_SIGNAL_LOGS = 1,
    SP_OTLP_SIGNAL_TRACES = 2
} sp_otlp_signal;

/*
 * Appends the JSON of the serialized request bytes[0..len) of signal, and
 * a newline, to out. SP_OK; SP_ERR_INVALID when the bytes do not decode
 * (out unchanged); out's error.
 */
SP_API sp_status sp_otlp_json_append(sp_buf *out, sp_otlp_signal signal,
    const void *bytes, size_t len);

#endif
