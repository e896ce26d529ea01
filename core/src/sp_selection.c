#include <math.h>
#include <string.h>

#include "sp_selection.h"

uint32_t
sp_selection_threshold(double probability)
{
    /* Written so that NaN, which fails every comparison, selects nothing. */
    if (!(probability > 0.0)) {
        return SP_SELECTION_THRESHOLD_NONE;
    }
    if (probability > SP_SELECTION_PROBABILITY_MAX) {
        probability = SP_SELECTION_PROBABILITY_MAX;
    }
    return (uint32_t)floor(probability * (double)SP_SELECTION_R_MAX);
}

bool
sp_selection_by_trace_id(const uint8_t trace_id[16], uint32_t threshold)
{
    uint32_t r;

    if (threshold == SP_SELECTION_THRESHOLD_NONE) {
        return false;
    }
    r = (uint32_t)(trace_id[12] & 0x0F) << 24 | (uint32_t)trace_id[13] << 16
        | (uint32_t)trace_id[14] << 8 | trace_id[15];
    return r <= threshold;
}

void
sp_selection_decide(sp_baggage *baggage, const uint8_t trace_id[16],
    uint32_t threshold, bool recorded, sp_selection *out)
{
    /* Room for "highest"; a longer value is SP_ERR_TOO_LONG, so other. */
    char value[sizeof(SP_SNAPSHOT_VOLUME_HIGHEST)];
    size_t len;
    sp_status rc = SP_ERR_NOT_FOUND;

    if (baggage != NULL) {
        rc = sp_baggage_get(baggage, SP_SNAPSHOT_VOLUME_KEY, value,
                            sizeof(value), &len);
    }

    if (rc == SP_ERR_NOT_FOUND) {
        out->received = false;
        out->selected = sp_selection_by_trace_id(trace_id, threshold);
        out->volume = out->selected ? SP_SNAPSHOT_HIGHEST : SP_SNAPSHOT_OFF;
        if (baggage != NULL) {
            /* Cannot fail: a valid key and value, far below 8192 bytes. */
            (void)sp_baggage_set(baggage, SP_SNAPSHOT_VOLUME_KEY,
                                 out->selected ? SP_SNAPSHOT_VOLUME_HIGHEST
                                               : SP_SNAPSHOT_VOLUME_OFF,
                                 NULL);
        }

    } else {
        /* SP_ERR_TOO_LONG: longer than "highest", so some other value. */
        out->received = true;
        out->volume = SP_SNAPSHOT_OTHER;
        if (rc == SP_OK) {
            if (len == strlen(SP_SNAPSHOT_VOLUME_HIGHEST)
                && memcmp(value, SP_SNAPSHOT_VOLUME_HIGHEST, len) == 0)
            {
                out->volume = SP_SNAPSHOT_HIGHEST;
            } else if (len == strlen(SP_SNAPSHOT_VOLUME_OFF)
                       && memcmp(value, SP_SNAPSHOT_VOLUME_OFF, len) == 0)
            {
                out->volume = SP_SNAPSHOT_OFF;
            }
        }
        out->selected = out->volume == SP_SNAPSHOT_HIGHEST;
    }

    /* SPEC section 2: only recorded entry spans can be profiled. */
    out->profiled = out->selected && recorded;
}
