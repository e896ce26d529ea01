/*
 * CRC32C (sp_crc32c.h): reflected, polynomial 0x82f63b78, initial value
 * and final xor all ones, as in iSCSI, so published test vectors apply.
 */
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

#include "sp_crc32c.h"

#define SP_CRC32C_POLY  0x82f63b78u

/*
 * Slicing by eight: table[k][b] is the CRC of byte b followed by k zero
 * bytes, so eight bytes take eight lookups and no serial chain through
 * the bytes. Filled by the constructor below, read-only afterwards.
 */
static uint32_t sp_crc32c_table[8][256];
static bool     sp_crc32c_hw;

/*
 * The path sp_crc32c takes, set with the flag: one jump through it
 * instead of a test of the flag and a jump, 2 instructions fewer a
 * record on each side of the ring (callgrind).
 */
uint32_t (*sp_crc32c_path)(uint32_t, const void *, size_t) = sp_crc32c_soft;

/*
 * At load time, before main or before dlopen returns, so before any
 * signal handler or thread can compute a CRC: the handler then reads two
 * settled values. cpuid rather than __builtin_cpu_supports: the latter
 * reads what libgcc's own constructor fills in, which may not have run
 * yet when this one does (__builtin_cpu_init would be needed first).
 */
__attribute__((constructor)) static void
sp_crc32c_init(void)
{
    uint32_t c;
    unsigned b, k;

    for (b = 0; b < 256; b++) {
        c = b;
        for (k = 0; k < 8; k++) {
            c = (c >> 1) ^ (SP_CRC32C_POLY & (0u - (c & 1)));
        }
        sp_crc32c_table[0][b] = c;
    }
    for (b = 0; b < 256; b++) {
        c = sp_crc32c_table[0][b];
        for (k = 1; k < 8; k++) {
            c = (c >> 8) ^ sp_crc32c_table[0][c & 0xff];
            sp_crc32c_table[k][b] = c;
        }
    }
#if defined(__x86_64__)
    {
        unsigned eax, ebx, ecx, edx;

        sp_crc32c_hw = __get_cpuid(1, &eax, &ebx, &ecx, &edx)
                       && (ecx & bit_SSE4_2) != 0;
        if (sp_crc32c_hw) {
            sp_crc32c_path = sp_crc32c_sse42;
        }
    }
#endif
}

bool
sp_crc32c_hardware(void)
{
    return sp_crc32c_hw;
}

uint32_t
sp_crc32c_soft(uint32_t crc, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    const uint32_t     (*t)[256] = sp_crc32c_table;
    uint32_t             c = ~crc, lo, hi;

    for (; len >= 8; p += 8, len -= 8) {
        /* bytes in memory order, whatever the machine's byte order */
        lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8
                  | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16
             | (uint32_t)p[7] << 24;
        c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff]
            ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24]
            ^ t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff]
            ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    }
    for (; len > 0; p++, len--) {
        c = (c >> 8) ^ t[0][(c ^ *p) & 0xff];
    }
    return ~c;
}

#if defined(__x86_64__)

static inline uint64_t
sp_load64(const unsigned char *p)
{
    uint64_t w;

    memcpy(&w, p, 8);
    return w;
}

static inline uint32_t
sp_load32(const unsigned char *p)
{
    uint32_t w;

    memcpy(&w, p, 4);
    return w;
}

static inline uint16_t
sp_load16(const unsigned char *p)
{
    uint16_t w;

    memcpy(&w, p, 2);
    return w;
}

/*
 * Whole 512-byte blocks first, through a loop that a record seldom
 * enters (its test is two instructions), then the words left, up to 63,
 * through a jump into a run of crc32s: a loop's add, compare and branch
 * per word would be as many instructions again as the crc32s (callgrind
 * counts them on both sides of the ring for every record). A span's
 * record (about 51 words) takes the jump alone; with a jump over 32
 * words and a loop for the rest it took 6 more (callgrind). The loads
 * fold into the crc32s' memory operands; x86 is little-endian, so a
 * word's bytes go in memory order, as the software path takes them.
 */
#define SP_CRC_AT(k) (c = _mm_crc32_u64(c, sp_load64(p - 8 * (k))))
#define SP_CRC_CASE(k) case k: SP_CRC_AT(k); __attribute__((fallthrough));
#define SP_CRC_NEXT(k) (c = _mm_crc32_u64(c, sp_load64(p + 8 * (k))))
#define SP_CRC_NEXT8(k) \
    (SP_CRC_NEXT(k), SP_CRC_NEXT(k + 1), SP_CRC_NEXT(k + 2), \
     SP_CRC_NEXT(k + 3), SP_CRC_NEXT(k + 4), SP_CRC_NEXT(k + 5), \
     SP_CRC_NEXT(k + 6), SP_CRC_NEXT(k + 7))
__attribute__((target("sse4.2"))) uint32_t
sp_crc32c_sse42(uint32_t crc, const void *buf, size_t len)
{
    const unsigned char *p = buf, *end;
    uint64_t             c = ~crc;
    uint32_t             v;
    size_t               words;

    if (len >= 512) {
        end = p + (len & ~(size_t)511);
        do {
            SP_CRC_NEXT8(0);  SP_CRC_NEXT8(8);  SP_CRC_NEXT8(16);
            SP_CRC_NEXT8(24); SP_CRC_NEXT8(32); SP_CRC_NEXT8(40);
            SP_CRC_NEXT8(48); SP_CRC_NEXT8(56);
            p += 512;
        } while (p != end);
    }
    words = (len >> 3) & 63;
    p += words * 8;
    switch (words) {
    SP_CRC_CASE(63) SP_CRC_CASE(62) SP_CRC_CASE(61) SP_CRC_CASE(60)
    SP_CRC_CASE(59) SP_CRC_CASE(58) SP_CRC_CASE(57) SP_CRC_CASE(56)
    SP_CRC_CASE(55) SP_CRC_CASE(54) SP_CRC_CASE(53) SP_CRC_CASE(52)
    SP_CRC_CASE(51) SP_CRC_CASE(50) SP_CRC_CASE(49) SP_CRC_CASE(48)
    SP_CRC_CASE(47) SP_CRC_CASE(46) SP_CRC_CASE(45) SP_CRC_CASE(44)
    SP_CRC_CASE(43) SP_CRC_CASE(42) SP_CRC_CASE(41) SP_CRC_CASE(40)
    SP_CRC_CASE(39) SP_CRC_CASE(38) SP_CRC_CASE(37) SP_CRC_CASE(36)
    SP_CRC_CASE(35) SP_CRC_CASE(34) SP_CRC_CASE(33) SP_CRC_CASE(32)
    SP_CRC_CASE(31) SP_CRC_CASE(30) SP_CRC_CASE(29) SP_CRC_CASE(28)
    SP_CRC_CASE(27) SP_CRC_CASE(26) SP_CRC_CASE(25) SP_CRC_CASE(24)
    SP_CRC_CASE(23) SP_CRC_CASE(22) SP_CRC_CASE(21) SP_CRC_CASE(20)
    SP_CRC_CASE(19) SP_CRC_CASE(18) SP_CRC_CASE(17) SP_CRC_CASE(16)
    SP_CRC_CASE(15) SP_CRC_CASE(14) SP_CRC_CASE(13) SP_CRC_CASE(12)
    SP_CRC_CASE(11) SP_CRC_CASE(10) SP_CRC_CASE(9) SP_CRC_CASE(8)
    SP_CRC_CASE(7) SP_CRC_CASE(6) SP_CRC_CASE(5) SP_CRC_CASE(4)
    SP_CRC_CASE(3) SP_CRC_CASE(2) SP_CRC_CASE(1)
    default: break;
    }
    /*
     * The bytes after the words through a second jump, each case its own
     * crc32s and return: 2 instructions fewer a record than a test and a
     * branch for each of the 4, 2 and 1 bytes (callgrind).
     */
    v = (uint32_t)c;
    switch (len & 7) {
    case 1:
        return ~_mm_crc32_u8(v, p[0]);
    case 2:
        return ~_mm_crc32_u16(v, sp_load16(p));
    case 3:
        return ~_mm_crc32_u8(_mm_crc32_u16(v, sp_load16(p)), p[2]);
    case 4:
        return ~_mm_crc32_u32(v, sp_load32(p));
    case 5:
        return ~_mm_crc32_u8(_mm_crc32_u32(v, sp_load32(p)), p[4]);
    case 6:
        v = _mm_crc32_u32(v, sp_load32(p));
        return ~_mm_crc32_u16(v, sp_load16(p + 4));
    case 7:
        v = _mm_crc32_u32(v, sp_load32(p));
        v = _mm_crc32_u16(v, sp_load16(p + 4));
        return ~_mm_crc32_u8(v, p[6]);
    default:
        return ~v;
    }
}
#undef SP_CRC_AT
#undef SP_CRC_CASE
#undef SP_CRC_NEXT
#undef SP_CRC_NEXT8

#endif
