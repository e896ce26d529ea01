/*
 * A flame graph as SVG, from folded stacks (sp_dump_folded's output:
 * "root;...;leaf VALUE" per line). EXPORTER SIDE ONLY (heap).
 *
 * The drawing: the root at the bottom, each frame a box as wide as its
 * share of the total, children left to right in the order of the input,
 * equal frames under one parent merged; a box's tooltip (<title>) names
 * the frame with its value and percentage. Colours come from a hash of
 * the name, so a function has the same colour in every graph. Plain SVG
 * 1.1, no script.
 *
 * The input is untrusted: a line that is not "FRAMES VALUE" with VALUE a
 * positive decimal integer is skipped; names are XML-escaped, invalid
 * UTF-8 and control characters replaced. Depth is cut at
 * SP_FLAME_MAX_DEPTH frames.
 */
#ifndef SP_FLAME_H
#define SP_FLAME_H

#include "sp_common.h"
#include "sp_encode.h"

#define SP_FLAME_MAX_DEPTH 1024

typedef struct sp_flame_options {
    const char *title;      /* NULL: "Flame graph" */
    const char *unit;       /* what a value counts; NULL: "samples" */
    unsigned    width;      /* pixels; 0: 1200 */
} sp_flame_options;

/*
 * Appends the SVG of folded[0..len) to out. With no valid line it draws
 * the title and says there were no samples. SP_OK; out's error;
 * SP_ERR_NOMEM.
 */
SP_API sp_status sp_flame_svg(sp_buf *out, const char *folded, size_t len,
                              const sp_flame_options *options);

#endif
