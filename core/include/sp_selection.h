/*
 * Trace snapshot selection, SPEC section 3 (seed 003 with the algorithm
 * current upstream agents use).
 *
 * The baggage entry splunk.trace.snapshot.volume carries the decision
 * along the trace. An entry span that receives it uses it as is and never
 * rewrites it; one that does not decides from the trace id and sets it.
 */
#ifndef SP_SELECTION_H
#define SP_SELECTION_H

#include "sp_common.h"
#include "sp_baggage.h"

#define SP_SNAPSHOT_VOLUME_KEY      "splunk.trace.snapshot.volume"
#define SP_SNAPSHOT_VOLUME_HIGHEST  "highest"
#define SP_SNAPSHOT_VOLUME_OFF      "off"

#define SP_SELECTION_PROBABILITY_DEFAULT 0.01
#define SP_SELECTION_PROBABILITY_MAX     0.10

/* The largest r: the last 7 hex digits of a trace id. */
#define SP_SELECTION_R_MAX 0x0FFFFFFFu

/* The threshold that selects no trace id (a probability <= 0). */
#define SP_SELECTION_THRESHOLD_NONE UINT32_MAX

typedef enum sp_snapshot_volume {
    SP_SNAPSHOT_OFF,        /* "off": received, or decided here */
    SP_SNAPSHOT_HIGHEST,    /* "highest": received, or decided here */
    SP_SNAPSHOT_OTHER       /* received, any other value: not selected */
} sp_snapshot_volume;

typedef struct sp_selection {
    sp_snapshot_volume volume;  /* the trace's, as now in the baggage */
    bool received;      /* the baggage had the entry; else decided here */
    bool selected;      /* volume == SP_SNAPSHOT_HIGHEST */
    /*
     * selected and the entry span is recorded: give the span
     * splunk.snapshot.profiling=true and sample its threads while it lives.
     */
    bool profiled;
} sp_selection;

/*
 * floor(p * 0x0FFFFFFF). The configuration allows 0 < p <= 0.10 and has
 * already reported anything else; this clamps again so that no caller can
 * select more: p above 0.10 (or +inf) acts as 0.10, p <= 0 (or NaN) gives
 * SP_SELECTION_THRESHOLD_NONE, which selects nothing. Plain floor(0 * max)
 * would be 0, which still selects the trace ids ending in 0000000.
 */
SP_API uint32_t sp_selection_threshold(double probability);

/*
 * r = the last 7 hex digits of the 32-digit trace id, i.e. the low 28 bits
 * of its last 4 bytes; selected iff r <= threshold (never for
 * SP_SELECTION_THRESHOLD_NONE).
 */
SP_API bool sp_selection_by_trace_id(const uint8_t trace_id[16],
    uint32_t threshold);

/*
 * Decides for an entry span. baggage holds what the request received
 * (NULL when the baggage propagator is off: then only the trace id
 * counts). With a splunk.trace.snapshot.volume entry (the first, if there
 * are several), the trace is selected iff its percent-decoded value is
 * exactly "highest", and baggage is not touched. Without one, the trace id
 * decides and the entry is set to "highest" or "off", dropping members from
 * the end of a full baggage if it must (see sp_baggage_set); that happens
 * whether or not the span is recorded, so that downstream agrees. A
 * member whose value was malformed was dropped by sp_baggage_parse, so it
 * counts as no entry.
 */
SP_API void sp_selection_decide(sp_baggage *baggage,
    const uint8_t trace_id[16], uint32_t threshold, bool recorded,
    sp_selection *out);

#endif
