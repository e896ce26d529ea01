/*
 * SP_ASAN: defined when the build has AddressSanitizer, which gcc and
 * clang each announce their own way. Its allocator then serves malloc,
 * and its leak checker runs at exit: what reads glibc's heap, or leaves
 * libdw's known leaks behind, needs to know.
 */
#ifndef SP_ASAN_H
#define SP_ASAN_H

#if defined(__SANITIZE_ADDRESS__)
#define SP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SP_ASAN 1
#endif
#endif

#endif
