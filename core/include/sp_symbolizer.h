/*
 * The symbolizer: names the addresses of a worker's stack samples, in the
 * exporter process, from the files the worker had loaded (its table of
 * objects, sp_record.h). Built on elfutils (libdwfl, libdw).
 *
 * Where names come from, in order:
 *   1. DWARF: the object's own, or separate debug info found by GNU build
 *      id (<dir>/.build-id/xx/rest.debug under each debug directory) or
 *      by .gnu_debuglink (next to the object, in its .debug/ directory,
 *      then <dir>/<object's directory>/ under each debug directory). A
 *      separate file is used only if its build id is the object's (or,
 *      when the object has none, its CRC is the one the link records).
 *      Inlined calls are reported as such.
 *   2. .symtab (the object's, else the separate debug file's).
 *   3. .dynsym.
 * No network: debuginfod is never asked, whatever DEBUGINFOD_URLS says.
 *
 * A frame's name is never guessed (SPEC section 5). A symbol names an
 * address only if it contains it: st_value <= address < st_value +
 * st_size. A symbol of size 0 (an assembly label) names only its own
 * address: the code after a label may belong to a static function the
 * stripped file no longer describes. A file and a line come only from
 * DWARF, with the function containing the address: the line table of a
 * unit also covers bytes no function of it owns (top-level assembly), so
 * a frame named from a symbol table has no line. An object whose file
 * does not carry the build id the worker recorded (replaced since) names
 * nothing. Frames that stay unnamed keep their mapping and address, so
 * they can be named later (pprof, by build id).
 *
 * Caching: one libdwfl session per object file, keyed by GNU build id,
 * or when the worker recorded none by path (its size and mtime checked
 * again at most once a second); and the answer per address. An object
 * that could not be opened is tried again after 10 seconds.
 *
 * Memory is bounded by the options: at most max_objects files open (the
 * least recently used is closed to open another; each holds up to two
 * descriptors and its file mapped); what libdw has read of them (inflated
 * debug sections, parsed units and line tables), measured as the heap's
 * growth during its calls (mallinfo2), at most max_debug_bytes [64 MiB]
 * between lookups: past it every session is ended (counted in
 * debug_resets) and each file opened again at its next address not
 * cached, so one lookup may take what one file's first lookup reads above
 * it; plus a fixed address cache of max_addresses entries of 64 bytes, as
 * many 24-byte slots for inlined frames and 40 bytes for their names
 * (copies, so that cached answers outlive libdw's sessions; emptied with
 * the cache when full, counted in name_flushes), allocated at creation:
 * 2 MiB with the defaults.
 *
 * A reset makes each file read again, at its next new address, what it
 * read to name its first one (libc with Debian's libc6-dbg: 12 MiB of
 * inflated sections). So that resets cannot spin on that, when at the
 * bound the sessions' first reading is more than twice their reading
 * since (a file whose debug info alone is over the bound or close under
 * it), the file of them that read the most first is named from then on
 * from its symbol tables only (.symtab, its own or its debug file's, else
 * .dynsym: functions, no files, lines or inlined calls), never reading
 * its DWARF again: counted in over_cap_objects, told to over_cap. What
 * such a file holds (its symbol table) does not grow with the addresses;
 * of it, the index below is charged to the bound. The mark outlives the
 * file's place among the max_objects: the last 64 such files are
 * remembered (by build id, else by path, size and mtime), and one opened
 * again is named from its symbol tables at once, neither read nor told
 * again.
 *
 * A name from a symbol table is found by binary search: each session
 * indexes its file's table once at its first such address (sorted by
 * address: libc6-dbg's .symtab, 10,000 symbols, 254 KiB), and picks the
 * symbol dwfl_module_addrinfo would; the index is held with libdw's state
 * and counted in max_debug_bytes (a table whose index would take more
 * than a quarter of it is searched by libdwfl symbol by symbol instead).
 *
 * Not thread-safe: one thread uses a symbolizer. Errors are returned,
 * never printed.
 */
#ifndef SP_SYMBOLIZER_H
#define SP_SYMBOLIZER_H

#include "sp_common.h"
#include "sp_record.h"

#define SP_SYMBOLIZER_DEFAULT_OBJECTS     64
#define SP_SYMBOLIZER_DEFAULT_ADDRESSES   16384
#define SP_SYMBOLIZER_DEFAULT_DEBUG_DIRS  "/usr/lib/debug"
#define SP_SYMBOLIZER_DEFAULT_DEBUG_BYTES ((size_t)64 << 20)
#define SP_SYMBOL_MAX_INLINE              8

typedef struct sp_symbolizer sp_symbolizer;

/*
 * Told once for each file whose debug info the bound cannot hold (see
 * above), before its DWARF is dropped: the object's path, its separate
 * debug file's (NULL when none or not known), and what libdw took to name
 * its first address.
 */
typedef void (*sp_symbolizer_over_cap_fn)(void *ctx, const char *path,
    const char *debug_path, size_t first_bytes);

typedef struct sp_symbolizer_options {
    /* Directories of separate debug info, ':'-separated, each absolute.
       NULL: SP_SYMBOLIZER_DEFAULT_DEBUG_DIRS; "": none. */
    const char *debug_dirs;
    uint32_t    max_objects;    /* 0: SP_SYMBOLIZER_DEFAULT_OBJECTS */
    uint32_t    max_addresses;  /* 0: SP_SYMBOLIZER_DEFAULT_ADDRESSES;
                                   rounded up to a power of two */
    size_t      max_debug_bytes; /* what libdw may hold between lookups;
                                    0: SP_SYMBOLIZER_DEFAULT_DEBUG_BYTES */
    sp_symbolizer_over_cap_fn over_cap;  /* NULL: not told */
    void       *over_cap_ctx;
} sp_symbolizer_options;

/* Where a name came from. */
typedef enum sp_symbol_source {
    SP_SYMBOL_NONE = 0,         /* not named */
    SP_SYMBOL_DWARF = 1,
    SP_SYMBOL_SYMTAB = 2,
    SP_SYMBOL_DYNSYM = 3
} sp_symbol_source;

/* What became of the file of the object that contains the address. */
typedef enum sp_object_file {
    SP_OBJECT_FILE_NONE = 0,        /* no object contains the address */
    SP_OBJECT_FILE_OK = 1,          /* read; build id as recorded */
    SP_OBJECT_FILE_UNREADABLE = 2,  /* missing, not a regular file, no
                                       permission, bad path */
    SP_OBJECT_FILE_NOT_ELF = 3,     /* not an ELF executable or shared
                                       object */
    SP_OBJECT_FILE_MISMATCH = 4     /* its build id is not the one the
                                       worker recorded: replaced since */
} sp_object_file;

/* One function at one position. */
typedef struct sp_symbol_line {
    const char *function;       /* NULL: not known */
    const char *file;           /* NULL: not known */
    uint32_t    line;           /* 0: not known */
} sp_symbol_line;

/*
 * What one address is. Strings point into the symbolizer: valid until the
 * next call of sp_symbolizer_lookup or sp_symbolizer_destroy (a lookup may
 * close a file to open another); copy them to keep them.
 *
 * For pprof: Location.address is `address` (the worker's, within
 * [object->start, object->end)), and the Mapping is object->start,
 * object->end, object->file_offset, object->path and object->build_id.
 * elf_address is the same address in the file's own terms (its virtual
 * addresses, as addr2line -e FILE takes them).
 */
typedef struct sp_symbol {
    int              object_index;  /* into the table; -1: none */
    const sp_object *object;        /* &objects[object_index], or NULL */
    uint64_t         address;       /* as given, even for a return
                                       address */
    uint64_t         elf_address;   /* address - object->load_bias */
    sp_object_file   file_state;
    sp_symbol_source source;
    /* The function that contains the address. When the address is in
       code inlined into it, file and line are those of the outermost
       inlined call. */
    sp_symbol_line   frame;
    /* The inlined calls the address is in, innermost first: inlined[0]
       is at the address itself, each other one at the call of the one
       before it, and `frame` at the call of the last one. The innermost
       are dropped past SP_SYMBOL_MAX_INLINE. */
    uint8_t          inline_count;
    sp_symbol_line   inlined[SP_SYMBOL_MAX_INLINE];
} sp_symbol;

typedef struct sp_symbolizer_stats {
    uint64_t lookups;
    uint64_t cache_hits;        /* answered from the address cache */
    uint64_t files_opened;      /* object files opened (libdwfl sessions) */
    uint64_t files_failed;      /* unreadable, not ELF, or mismatch */
    uint64_t files_closed;      /* closed to make room, or changed */
    uint64_t debug_resets;      /* libdw's state dropped: max_debug_bytes */
    uint64_t over_cap_objects;  /* files named without DWARF since: their
                                   debug info is too big for the bound */
    uint64_t name_flushes;      /* address cache emptied: names full */
    uint64_t debug_bytes;       /* what libdw holds now, as measured */
    uint32_t objects;           /* objects cached now (failed ones too) */
} sp_symbolizer_stats;

/*
 * Creates a symbolizer; options may be NULL for the defaults. SP_OK,
 * SP_ERR_INVALID (a debug directory not absolute), SP_ERR_NOMEM.
 */
SP_API sp_status sp_symbolizer_create(const sp_symbolizer_options *options,
    sp_symbolizer **out);

SP_API void sp_symbolizer_destroy(sp_symbolizer *s);

/*
 * Names one address of the worker whose objects are objects[0..count).
 * return_address: the address is a return address (every frame but the
 * first of a stack), so the instruction named is the call before it; the
 * address reported stays the one given.
 *
 * SP_OK: an object contains the address (out->object is set, the rest as
 * far as known); SP_ERR_NOT_FOUND: no object does (out->object_index is
 * -1); SP_ERR_INVALID: s or out NULL, or objects NULL with count > 0;
 * SP_ERR_NOMEM: out says what was known without the file.
 */
SP_API sp_status sp_symbolizer_lookup(sp_symbolizer *s,
    const sp_object *objects, size_t count, uint64_t address,
    bool return_address, sp_symbol *out);

SP_API void sp_symbolizer_stats_get(const sp_symbolizer *s,
    sp_symbolizer_stats *out);

/* A word for logs and counters: "ok", "unreadable", ... */
SP_API const char *sp_object_file_name(sp_object_file state);

#endif
