/*
 * The OpenTelemetry resource spanprof exports with its spans and profiling
 * logs (SPEC.md section 5), and the detection of it for a server process.
 */
#ifndef SP_RESOURCE_H
#define SP_RESOURCE_H

#include "sp_common.h"

/* Room for a container id: 64 lowercase hex digits and a NUL. */
#define SP_CONTAINER_ID_SIZE 65

typedef enum sp_attr_type {
    SP_ATTR_STRING = 0,
    SP_ATTR_INT = 1
} sp_attr_type;

/*
 * An ordered list of attributes, each a string or an int64. Setting a key
 * that is present replaces its value (and type) in place; a new key goes
 * at the end. Keys are non-empty strings; the resource copies what it is
 * given.
 */
typedef struct sp_resource sp_resource;

SP_API sp_status sp_resource_create(sp_resource **out);

/* A deep copy, e.g. one per worker before setting its process.pid. */
SP_API sp_status sp_resource_copy(const sp_resource *src, sp_resource **out);

/* NULL is accepted and ignored. */
SP_API void sp_resource_destroy(sp_resource *r);

/* SP_ERR_INVALID for a NULL or empty key or a NULL value; SP_ERR_NOMEM. */
SP_API sp_status sp_resource_set_string(sp_resource *r, const char *key,
                                        const char *value);
SP_API sp_status sp_resource_set_int(sp_resource *r, const char *key,
                                     int64_t value);

SP_API size_t sp_resource_count(const sp_resource *r);

/*
 * The i-th attribute (i < count). sp_resource_string is NULL for an int
 * attribute and sp_resource_int is 0 for a string one. Strings belong to
 * the resource and live until the attribute is replaced or the resource
 * destroyed.
 */
SP_API const char *sp_resource_key(const sp_resource *r, size_t i);
SP_API sp_attr_type sp_resource_type(const sp_resource *r, size_t i);
SP_API const char *sp_resource_string(const sp_resource *r, size_t i);
SP_API int64_t sp_resource_int(const sp_resource *r, size_t i);

/*
 * A number that names the resource as it is now: a resource gets a new
 * one at each change, and no two resources of the process, alive or gone,
 * ever had the same. Whoever keeps an encoding of a resource keeps it
 * with this, and encodes again when it differs. Never 0.
 */
SP_API uint64_t sp_resource_version(const sp_resource *r);

/* The index of key in *index, or SP_ERR_NOT_FOUND. */
SP_API sp_status sp_resource_find(const sp_resource *r, const char *key,
                                  size_t *index);

/*
 * What sp_resource_detect works from. Every field is optional: zero it
 * (memset, or `= {0}`) and set what you know. The configuration layer owns
 * the environment: the OTEL_* values are handed in here, never read.
 */
typedef struct sp_resource_input {
    /* "nginx" or "httpd": process.runtime.name, and the default service
     * name unknown_service:<server>. NULL or "": process.runtime.name is
     * left out and the default service name is unknown_service. */
    const char *server;
    /* The server's version, e.g. "1.22.1": process.runtime.version.
     * NULL or "": the attribute is left out. */
    const char *server_version;
    /* process.pid. 0 or less: getpid(). */
    int64_t pid;
    /* host.name. NULL or "": gethostname(); left out if that fails. */
    const char *host_name;
    /* process.executable.name is the base name of the link's target.
     * NULL: /proc/self/exe. If the path is not a symbolic link, its own
     * base name. Left out if neither can be read. */
    const char *exe_path;
    /* Where to look for container.id. NULL: /proc/self/cgroup and
     * /proc/self/mountinfo. A file that cannot be read gives nothing. */
    const char *cgroup_path;
    const char *mountinfo_path;
    /* OTEL_SERVICE_NAME. NULL or "": not set. */
    const char *service_name;
    /* OTEL_RESOURCE_ATTRIBUTES as configured (sp_kvlist.h format). NULL:
     * none. If it does not parse, all of it is ignored. */
    const char *resource_attributes;
} sp_resource_input;

/*
 * Builds the resource of a server process, in this order:
 *
 *   service.name            see below
 *   telemetry.sdk.name      "spanprof"
 *   telemetry.sdk.language  "cpp"
 *   telemetry.sdk.version   SP_VERSION
 *   telemetry.distro.name   "spanprof"
 *   telemetry.distro.version SP_VERSION
 *   host.name
 *   process.pid             int
 *   process.executable.name
 *   process.runtime.name    in->server
 *   process.runtime.version in->server_version
 *   container.id            only when sp_container_id_from_* finds one
 *   ...                     then OTEL_RESOURCE_ATTRIBUTES' other keys
 *
 * Precedence, highest first:
 * - process.pid and every telemetry.sdk.* key are always the detected
 *   values: the pid says which worker the data came from and the sdk keys
 *   say which SDK made it. OTEL_RESOURCE_ATTRIBUTES cannot change them.
 * - service.name: in->service_name (OTEL_SERVICE_NAME), else service.name
 *   from OTEL_RESOURCE_ATTRIBUTES, else unknown_service:<server>.
 * - Any other key in OTEL_RESOURCE_ATTRIBUTES replaces the detected value
 *   (host.name, container.id, telemetry.distro.*, ...) or is added as a
 *   string; the last of duplicate keys wins. Members with an empty value
 *   are skipped: an attribute cannot be removed, and an empty one would
 *   only hide the detected value.
 *
 * in may be NULL: every default. Only SP_ERR_NOMEM fails; a source that
 * cannot be read leaves its attribute out. *out is set only on SP_OK.
 */
SP_API sp_status sp_resource_detect(const sp_resource_input *in,
                                    sp_resource **out);

/*
 * Finds a container id in the text of /proc/<pid>/cgroup. Each line is
 * `hierarchy:controllers:path`; in the path, from the deepest component
 * up, the first one that is, once a trailing ".scope" is dropped, either
 * exactly 64 lowercase hex digits (cgroup v1 /docker/<id>,
 * /kubepods/<qos>/pod<uid>/<id>) or such an id after "docker-", "crio-",
 * "cri-containerd-", "libpod-" or ":cri-containerd:" (systemd scopes and
 * slices, v1 or v2). The first line with one wins. SP_OK and out set
 * (NUL-terminated), or SP_ERR_NOT_FOUND.
 */
SP_API sp_status sp_container_id_from_cgroup(const char *text, size_t len,
                                             char out[SP_CONTAINER_ID_SIZE]);

/*
 * Finds a container id in the text of /proc/<pid>/mountinfo, for cgroup v2
 * with a private cgroup namespace where /proc/self/cgroup says only "0::/".
 * In each line's root path (field 4) and mount source (after " - fstype"),
 * looks for a component of exactly 64 lowercase hex digits that comes
 * after a "containers" or "*-containers" component and does not directly
 * follow "sandboxes": /var/lib/docker/containers/<id>/hostname,
 * .../overlay-containers/<id>/userdata/hostname (podman). A match on the
 * line mounted at /etc/hostname wins, else the first in file order.
 * SP_OK and out set, or SP_ERR_NOT_FOUND.
 */
SP_API sp_status sp_container_id_from_mountinfo(const char *text, size_t len,
                                                char out[SP_CONTAINER_ID_SIZE]);

#endif
