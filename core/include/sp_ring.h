/*
 * The shared-memory region that carries records (sp_record.h) from a
 * server's workers to its exporter, and the rings inside it.
 *
 * The server's master/parent creates the memory (anonymous MAP_SHARED, or a
 * memfd the exporter inherits) and calls sp_region_init once, before it
 * forks. Every process then calls sp_region_attach on its own mapping: the
 * region stores offsets only, never pointers, so the mappings may sit at
 * different addresses. The handles that attach returns live in the
 * process's own memory and keep the sizes checked at attach time, so no
 * later change to the shared bytes can make a writer or the reader touch
 * memory outside the region.
 *
 * A region has N slots; each slot is one ring, owned by one worker process
 * (the pid is stored in the slot). Slot ownership:
 *   - claim: a worker takes a free slot (owner 0) with a compare-and-swap
 *     from 0 to its pid. A slot whose owner is dead may be taken the same
 *     way (from the dead owner to the new one), but only once it is
 *     drained (nothing reserved, committed or not, is left unread), so the
 *     new owner never inherits a half-written record. A claim by a pid that
 *     already owns a slot returns that slot.
 *   A process writes only into the ring claimed for its own pid: a child
 *   forked from a worker claims its own before it writes.
 *   - release: the owner, once none of its threads or handlers can write
 *     any more, stores 0. What it wrote stays readable; records carry their
 *     pid, so a new owner appending after them confuses nothing.
 *   - the exporter, after draining what is committed, calls
 *     sp_ring_reset_if_abandoned: if the owner died, it skips what the
 *     owner left uncommitted (counted) and frees the slot. A slot released
 *     with a reservation never committed (a prefork child that exits from
 *     its signal handler, in the middle of a write) is reset the same way,
 *     held by the exporter meanwhile so that no worker claims it; else the
 *     next owner's records would wait behind that one for ever.
 * "Dead" means kill(pid, 0) fails with ESRCH, or the pid is now a zombie,
 * or it belongs to a newer process than the one that claimed (the slot
 * keeps the owner's start time from /proc, so a reused pid is not taken
 * for the owner).
 *
 * A ring is written by every thread of its owner, and by signal handlers
 * that interrupt any of them (also in the middle of a write on the same
 * thread), and read by the exporter alone. Writers never block and never
 * wait for one another: a writer reserves space with a compare-and-swap on
 * the producer position, writes the body, then commits by a release store
 * into the record's header; a record that does not fit is dropped and
 * counted in dropped_full. Everything on the writer's path
 * (sp_ring_reserve, sp_ring_commit, sp_ring_cancel, sp_ring_write) is
 * async-signal-safe: lock-free atomics and memcpy only, no allocation, no
 * system call.
 *
 * The reader treats the ring as untrusted: a record whose header does not
 * hold together (lengths out of range, unknown type, bad checksum) is
 * counted in corrupt and skipped to the next valid record or to the
 * producer position; the bytes skipped are counted too. No length read
 * from the ring is followed before it has been checked.
 */
#ifndef SP_RING_H
#define SP_RING_H

#include "sp_common.h"
#include "sp_record.h"

/* Bumped whenever the region, ring or record layout changes. */
#define SP_RING_LAYOUT_VERSION  2

#define SP_REGION_MAX_SLOTS     4096
#define SP_RING_MIN_BYTES       4096            /* per ring, power of two */
#define SP_RING_MAX_BYTES       (1u << 30)

/* Every record's header, before its body; records are 8-byte aligned. */
#define SP_RING_HEADER_SIZE     24

/*
 * The largest body a ring of ring_bytes can ever hold (only when empty and
 * at the start of its data). A record never crosses the end of the data,
 * so one larger than half the ring may find no room for a long while:
 * size rings for records well under that (an objects table included).
 */
#define SP_RING_MAX_BODY(ring_bytes) ((ring_bytes) - SP_RING_HEADER_SIZE)

typedef struct sp_region sp_region;
typedef struct sp_ring sp_ring;

/* A writer's reservation, between sp_ring_reserve and commit or cancel. */
typedef struct sp_ring_token {
    uint64_t pos;       /* ring position of the record's header */
    uint32_t cap;       /* body bytes reserved */
    uint16_t type;
} sp_ring_token;

/*
 * A record as the reader sees it; body points into the ring. The view
 * also holds the records read before it with sp_ring_read_next, and
 * frees them all with it (sp_ring_consume).
 */
typedef struct sp_record_view {
    uint16_t    type;   /* sp_record_type */
    const void *body;   /* 8-byte aligned */
    size_t      len;
    uint64_t    pos;    /* private to the ring: the first record held */
    uint64_t    next;   /* private to the ring: after the last one */
    uint64_t    held;   /* private to the ring: records held */
} sp_record_view;

/* The ring bytes the records a view holds take (headers, the bodies
 * reserved, padding): what consuming it gives back to the writers. */
static inline size_t
sp_record_ring_bytes(const sp_record_view *v)
{
    return (size_t)(v->next - v->pos);
}

typedef struct sp_ring_counters {
    uint64_t written;       /* records committed (writers) */
    uint64_t dropped_full;  /* records dropped: no room (writers) */
    uint64_t read;          /* records consumed (reader) */
    uint64_t corrupt;       /* damaged headers or positions met (reader) */
    uint64_t skipped_bytes; /* bytes skipped to resynchronize (reader) */
    uint64_t pending_bytes; /* reserved and not yet consumed, now */
    uint32_t owner;         /* pid, 0 when free */
} sp_ring_counters;

/*
 * ---- the region
 */

/*
 * Bytes of a region of `slots` rings of ring_bytes each (a power of two
 * from SP_RING_MIN_BYTES to SP_RING_MAX_BYTES, slots from 1 to
 * SP_REGION_MAX_SLOTS); 0 when either is out of range.
 */
SP_API size_t sp_region_size(uint32_t slots, size_t ring_bytes);

/*
 * Lays a region out in mem (size bytes, at least sp_region_size, 64-byte
 * aligned as mmap's are): the master, once, before anyone attaches.
 * Touches the region's headers only, never the rings' data pages.
 * SP_ERR_INVALID for bad sizes or alignment.
 */
SP_API sp_status sp_region_init(void *mem, size_t size, uint32_t slots,
    size_t ring_bytes);

/*
 * A handle on the region in mem (this process's mapping, size bytes),
 * after checking its header: magic, layout version, slot count, ring size,
 * and that it fits in size. SP_ERR_INVALID when it does not hold together,
 * SP_ERR_NOMEM. Allocates: call it at start-up, not in a signal handler.
 */
SP_API sp_status sp_region_attach(void *mem, size_t size, sp_region **out);

/*
 * The layout version in the header of the region in mem, whatever it is:
 * 0 when mem holds no region (no magic, or too small). What tells an
 * exporter that sp_region_attach refused a region because a module of
 * another spanprof version laid it out (nginx keeps the module it loaded
 * across a reload, while the exporter is started anew from disk).
 */
SP_API uint32_t sp_region_layout(const void *mem, size_t size);

/* Frees the handle; the shared memory is left as it is. NULL is ignored. */
SP_API void sp_region_detach(sp_region *region);

/*
 * The ring this pid now owns, per the protocol above; NULL when every slot
 * is taken by a live process or not yet drained. Not async-signal-safe
 * (it reads /proc): call it when the worker starts.
 */
SP_API sp_ring *sp_region_claim(sp_region *region, uint32_t pid);

/*
 * Gives the slot up (the owner, when none of its writers can run any
 * more). Does nothing if the slot is no longer this handle's claim.
 */
SP_API void sp_region_release(sp_ring *ring);

/*
 * The region's one reader: an exporter takes the region before it reads
 * any ring, so two exporters (an old and a new one overlap on reload)
 * never read the same rings. SP_OK when pid is the reader now (the region
 * was free, already pid's, or its reader is dead); SP_ERR_NOT_FOUND when
 * another live process reads it.
 */
SP_API sp_status sp_region_claim_reader(sp_region *region, uint32_t pid);
SP_API void sp_region_release_reader(sp_region *region, uint32_t pid);

/*
 * A reader that waits for the region (sp_region_claim_reader failed) says
 * so; the one reading it asks, when it stops, whether another live
 * process waits (a reload: hand over at once, the new reader reads every
 * ring) or not (a stop: read on while writers may still write). Taking
 * the region clears the wish.
 */
SP_API void sp_region_want_reader(sp_region *region, uint32_t pid);
SP_API bool sp_region_reader_wanted(const sp_region *region, uint32_t pid);

/*
 * A worker tells its table of loaded objects (sp_objects.h) once, as a
 * record in its ring, and the reader that consumes it is the only one
 * that knows it. A new reader (an exporter replaced on reload, or
 * respawned) asks every writer to tell it again: when it takes the
 * region, and the one leaving when it has read its last record, so that
 * what the next one reads from there on comes after a table. Writers
 * compare sp_ring_objects_wanted with the value they last answered.
 */
SP_API void sp_region_want_objects(sp_region *region);

/* Whether a live process owns a slot: a writer that may still write. Reads
 * /proc for each owned slot. */
SP_API bool sp_region_writers_alive(const sp_region *region);

/*
 * How many claims (sp_region_claim) have succeeded in the region, ever.
 * A reader that loads this, then the slots' owners, and later finds the
 * number unchanged knows no slot was claimed in between: it can visit the
 * slots it saw in use (owned, or with records left) and skip the others
 * without missing a new worker's ring. Only a claim counts: a writer that
 * writes into a slot it never claimed is not seen this way.
 */
SP_API uint64_t sp_region_claims(const sp_region *region);

/* The exporter's iteration: every slot, owned or not. */
SP_API uint32_t sp_region_slot_count(const sp_region *region);
SP_API sp_ring *sp_region_ring(sp_region *region, uint32_t i);

/* Ring bytes per slot, as checked at attach. */
SP_API size_t sp_region_ring_bytes(const sp_region *region);

/*
 * ---- writers (async-signal-safe)
 */

/* The count sp_region_want_objects grows. */
SP_API uint64_t sp_ring_objects_wanted(const sp_ring *r);

/*
 * Reserves room for a body of len bytes of a record of type (an
 * sp_record_type) and returns where to write it (8-byte aligned), or NULL:
 * no room (the record is dropped and counted in dropped_full; len larger
 * than the ring can ever hold counts the same), or a bad type (not
 * counted). A non-NULL reservation must be ended by sp_ring_commit or
 * sp_ring_cancel, by the same thread, before the ring can be read past it.
 */
SP_API void *sp_ring_reserve(sp_ring *r, uint16_t type, size_t len,
    sp_ring_token *t);

/*
 * Publishes the first used_len bytes of the reservation (used_len <= the
 * len reserved; more is cut to it). The reader sees the whole body or
 * nothing. When nothing was reserved after it, the ring takes back the
 * rest of the reservation.
 */
SP_API void sp_ring_commit(sp_ring *r, sp_ring_token *t, size_t used_len);

/* Gives a reservation up: the reader skips it, nothing is counted. */
SP_API void sp_ring_cancel(sp_ring *r, sp_ring_token *t);

/*
 * Reserve, copy, commit. SP_OK; SP_ERR_NOMEM when the record was dropped
 * (counted); SP_ERR_INVALID for a bad type.
 */
SP_API sp_status sp_ring_write(sp_ring *r, uint16_t type, const void *body,
    size_t len);

/*
 * ---- the reader (the exporter, one thread)
 */

/*
 * The next committed record, or SP_ERR_NOT_FOUND when none is ready (the
 * ring is empty, or the next record is still being written). Damage met on
 * the way is counted and skipped. The view stays valid until
 * sp_ring_consume.
 */
SP_API sp_status sp_ring_read(sp_ring *r, sp_record_view *out);

/*
 * The record after v's, read without freeing v's: on SP_OK v is that
 * record and holds every record it held too, for one sp_ring_consume to
 * free them all. Only the usual case is read so: a committed record right
 * after v's, not a pad, sound, exactly what sp_ring_read would return
 * once v were consumed, while v holds less than 1/32 of the ring with it.
 * Otherwise v still holds what it held (its record fields no longer to be
 * used), to be consumed: SP_ERR_NOT_FOUND when no record is ready after
 * it (sp_ring_read would say so too); any other error when the record is
 * sp_ring_read's to take (a pad, the wrap, damage, or v holds enough).
 */
SP_API sp_status sp_ring_read_next(sp_ring *r, sp_record_view *v);

/*
 * Frees the records the view holds (the one sp_ring_read returned and
 * those sp_ring_read_next read after it), for writers to reuse; the view
 * then holds none, and sp_ring_read_next may read on after it.
 * SP_ERR_INVALID if it holds none, or they do not start at the ring's
 * next record.
 */
SP_API sp_status sp_ring_consume(sp_ring *r, sp_record_view *view);

/*
 * After draining what is committed: if the slot's owner is dead, or the
 * slot was released with something reserved and never committed, skips
 * what is left uncommitted (counted in skipped_bytes) and frees the slot.
 * reader is the caller's pid, which holds a released slot while it is
 * reset. SP_OK when the slot was reset; SP_ERR_NOT_FOUND when its owner is
 * alive, or it is free and empty; SP_ERR_INVALID when committed records
 * are still unread (read them first).
 */
SP_API sp_status sp_ring_reset_if_abandoned(sp_ring *r, uint32_t reader);

/*
 * Skips everything reserved and not yet consumed, committed or not, and
 * counts it in skipped_bytes. Safe only when no writer can be running:
 * for a ring whose owner is known to be gone.
 */
SP_API void sp_ring_skip_pending(sp_ring *r);

/*
 * The ring's counters (kept in the shared memory, so they survive an
 * exporter's restart and count every process that owned the slot).
 */
SP_API void sp_ring_stats(const sp_ring *r, sp_ring_counters *out);

/* The slot's owner (pid), 0 when free. */
SP_API uint32_t sp_ring_owner(const sp_ring *r);

#endif
