/*
 * spanprof core: what every public header shares.
 *
 * The core is plain C11 with no server headers. Functions report failure
 * through their return value; nothing in the core prints.
 */
#ifndef SP_COMMON_H
#define SP_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SP_VERSION "0.1.0"

/*
 * SP_API marks the core's interface. It is linked statically into each
 * module and the exporter and exported from none of them (the build hides
 * every symbol): a core function is called directly, never through a
 * PLT another module's symbol of the same name could interpose.
 */
#define SP_API

typedef enum sp_status {
    SP_OK = 0,
    SP_ERR_INVALID = -1, /* the input does not follow its grammar */
    SP_ERR_TOO_LONG = -2, /* the input or the output exceeds a limit */
    SP_ERR_NOMEM = -3,
    SP_ERR_IO = -4,
    SP_ERR_NOT_FOUND = -5
} sp_status;

#endif
