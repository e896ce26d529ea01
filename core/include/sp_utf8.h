/*
 * UTF-8 checks and repair for the strings that end up in OTLP string
 * fields: receivers built on golang/protobuf reject a whole request with
 * one invalid proto3 string, so every string is made valid where it is
 * written, each maximal invalid subsequence replaced by U+FFFD (EF BF BD),
 * as Unicode's substitution practice says.
 *
 * Async-signal-safe: no allocation, no library call but memcpy. Used by
 * the workers' span records and by the exporter's encoders.
 */
#ifndef SP_UTF8_H
#define SP_UTF8_H

#include "sp_common.h"

/* Whether s[0..len) is valid UTF-8 (no overlongs, surrogates, > U+10FFFF). */
SP_API bool sp_utf8_valid(const char *s, size_t len);

/* The bytes s[0..len) takes once repaired (len when it is valid). */
SP_API size_t sp_utf8_repaired_len(const char *s, size_t len);

/* Writes s[0..len) repaired to dst (sp_utf8_repaired_len bytes, which it
 * returns); valid input is copied unchanged. */
SP_API size_t sp_utf8_repair(void *dst, const char *s, size_t len);

#endif
