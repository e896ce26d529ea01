/*
 * A traceparent's layout and the vector code that writes an id's hex
 * digits: shared by sp_traceparent_format and the id generator, which
 * writes a new trace's digits from the registers it drew the ids into.
 * Private to the core.
 */
#ifndef SP_TRACECONTEXT_HEX_H
#define SP_TRACECONTEXT_HEX_H

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <tmmintrin.h>
#endif

/* Field positions in a traceparent: vv-<32>-<16>-ff */
#define TP_TRACE_ID_POS 3
#define TP_PARENT_ID_POS 36
#define TP_FLAGS_POS 53

#if defined(__SSE2__)

/* The high and the low nibble of each byte of x, each in a byte; the
 * digits' order is unpacklo/unpackhi of hi and lo. */
static inline __attribute__((always_inline)) void
hex_nibbles(__m128i x, __m128i *hi, __m128i *lo)
{
    __m128i low = _mm_set1_epi8(0x0f);

    *hi = _mm_and_si128(_mm_srli_epi16(x, 4), low);
    *lo = _mm_and_si128(x, low);
}

#endif

#if defined(__x86_64__)

/* Sixteen nibbles as their digits: one pshufb into the table of them. */
__attribute__((target("ssse3"))) static inline __m128i
hex_digits_ssse3(__m128i n)
{
    return _mm_shuffle_epi8(_mm_setr_epi8('0', '1', '2', '3', '4', '5', '6',
                                          '7', '8', '9', 'a', 'b', 'c', 'd',
                                          'e', 'f'), n);
}

/* A trace id's 32 digits and a span id's 16 (its low 8 bytes), from the
 * registers they are in, at their places in a traceparent. */
__attribute__((target("ssse3"))) static inline
__attribute__((always_inline)) void
hex_ids_ssse3(__m128i trace, __m128i span, char *out)
{
    __m128i hi, lo;

    hex_nibbles(trace, &hi, &lo);
    _mm_storeu_si128((__m128i *)(void *)(out + TP_TRACE_ID_POS),
                     hex_digits_ssse3(_mm_unpacklo_epi8(hi, lo)));
    _mm_storeu_si128((__m128i *)(void *)(out + TP_TRACE_ID_POS + 16),
                     hex_digits_ssse3(_mm_unpackhi_epi8(hi, lo)));
    hex_nibbles(span, &hi, &lo);
    _mm_storeu_si128((__m128i *)(void *)(out + TP_PARENT_ID_POS),
                     hex_digits_ssse3(_mm_unpacklo_epi8(hi, lo)));
}

#endif

#endif
