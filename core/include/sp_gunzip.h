/*
 * gzip decoding for spanprof-dump: the inverse of sp_gzip (sp_encode.h),
 * for profiles read back from LogRecord bodies. EXPORTER SIDE ONLY (zlib).
 */
#ifndef SP_GUNZIP_H
#define SP_GUNZIP_H

#include "sp_common.h"
#include "sp_encode.h"

/*
 * Appends what the gzip member in[0..len) holds to out. The input is
 * untrusted: out's limit bounds what it may inflate to (a small input can
 * claim gigabytes). SP_OK; SP_ERR_INVALID when in is not exactly one
 * complete gzip member with a good CRC and length; SP_ERR_TOO_LONG past
 * out's limit; SP_ERR_NOMEM. On failure out's length is as it was.
 */
SP_API sp_status sp_gunzip(sp_buf *out, const void *in, size_t len);

#endif
