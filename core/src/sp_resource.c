#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sp_kvlist.h"
#include "sp_resource.h"

/*
 * The semantic conventions' telemetry.sdk.language values name no C;
 * "cpp" is the nearest listed one (native code, the same toolchains and
 * symbolization), where a backend that knows only those values still
 * shows native stacks as such.
 */
#define SP_SDK_LANGUAGE "cpp"

/*
 * /proc files report a size of 0, so they are read until EOF into a
 * growing buffer. A mountinfo with thousands of mounts stays far below
 * this; past it the rest is not needed to find a container id.
 */
#define SP_PROC_FILE_MAX (4u << 20)

/* readlink gives no length up front; links longer than this are skipped. */
#define SP_LINK_MAX 65536

#define SP_CID_HEX 64

typedef struct {
    char *key;
    sp_attr_type type;
    char *str;
    int64_t num;
} sp_attr;

struct sp_resource {
    sp_attr *attrs;
    size_t n;
    size_t cap;
    uint64_t version;   /* sp_resource_version */
};

/* Versions handed out in this process: each is new, never 0. */
static _Atomic uint64_t sp_resource_versions;

static void
sp_resource_touch(sp_resource *r)
{
    r->version = atomic_fetch_add_explicit(&sp_resource_versions, 1,
                                           memory_order_relaxed) + 1;
}

sp_status
sp_resource_create(sp_resource **out)
{
    sp_resource *r;

    if (out == NULL) {
        return SP_ERR_INVALID;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return SP_ERR_NOMEM;
    }
    sp_resource_touch(r);
    *out = r;
    return SP_OK;
}

void
sp_resource_destroy(sp_resource *r)
{
    size_t i;

    if (r == NULL) {
        return;
    }
    for (i = 0; i < r->n; i++) {
        free(r->attrs[i].key);
        free(r->attrs[i].str);
    }
    free(r->attrs);
    free(r);
}

uint64_t
sp_resource_version(const sp_resource *r)
{
    return r->version;
}

sp_status
sp_resource_find(const sp_resource *r, const char *key, size_t *index)
{
    size_t i;

    for (i = 0; i < r->n; i++) {
        if (strcmp(r->attrs[i].key, key) == 0) {
            *index = i;
            return SP_OK;
        }
    }
    return SP_ERR_NOT_FOUND;
}

/*
 * Sets key to the given string (str != NULL) or number. The new strings
 * are made before anything changes, so a failure leaves r as it was.
 */
static sp_status
set_attr(sp_resource *r, const char *key, const char *str, int64_t num)
{
    size_t i, cap;
    sp_attr *a;
    char *copy = NULL, *kcopy;

    if (key == NULL || key[0] == '\0') {
        return SP_ERR_INVALID;
    }
    if (str != NULL) {
        copy = strdup(str);
        if (copy == NULL) {
            return SP_ERR_NOMEM;
        }
    }

    if (sp_resource_find(r, key, &i) == SP_OK) {
        a = &r->attrs[i];
        free(a->str);
    } else {
        if (r->n == r->cap) {
            cap = r->cap ? r->cap * 2 : 16;
            a = realloc(r->attrs, cap * sizeof(*a));
            if (a == NULL) {
                free(copy);
                return SP_ERR_NOMEM;
            }
            r->attrs = a;
            r->cap = cap;
        }
        kcopy = strdup(key);
        if (kcopy == NULL) {
            free(copy);
            return SP_ERR_NOMEM;
        }
        a = &r->attrs[r->n++];
        a->key = kcopy;
    }
    a->type = str != NULL ? SP_ATTR_STRING : SP_ATTR_INT;
    a->str = copy;
    a->num = str != NULL ? 0 : num;
    sp_resource_touch(r);
    return SP_OK;
}

sp_status
sp_resource_set_string(sp_resource *r, const char *key, const char *value)
{
    if (value == NULL) {
        return SP_ERR_INVALID;
    }
    return set_attr(r, key, value, 0);
}

sp_status
sp_resource_set_int(sp_resource *r, const char *key, int64_t value)
{
    return set_attr(r, key, NULL, value);
}

sp_status
sp_resource_copy(const sp_resource *src, sp_resource **out)
{
    sp_resource *r;
    sp_status rc;
    size_t i;

    rc = sp_resource_create(&r);
    if (rc != SP_OK) {
        return rc;
    }
    for (i = 0; i < src->n; i++) {
        rc = set_attr(r, src->attrs[i].key, src->attrs[i].str,
                      src->attrs[i].num);
        if (rc != SP_OK) {
            sp_resource_destroy(r);
            return rc;
        }
    }
    *out = r;
    return SP_OK;
}

size_t
sp_resource_count(const sp_resource *r)
{
    return r->n;
}

const char *
sp_resource_key(const sp_resource *r, size_t i)
{
    return i < r->n ? r->attrs[i].key : NULL;
}

sp_attr_type
sp_resource_type(const sp_resource *r, size_t i)
{
    return i < r->n ? r->attrs[i].type : SP_ATTR_STRING;
}

const char *
sp_resource_string(const sp_resource *r, size_t i)
{
    return i < r->n ? r->attrs[i].str : NULL;
}

int64_t
sp_resource_int(const sp_resource *r, size_t i)
{
    return i < r->n ? r->attrs[i].num : 0;
}

/* --- container id */

static int
is_lower_hex(const char *s, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
            return 0;
        }
    }
    return 1;
}

static int
has_suffix(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);

    return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

static int
equals(const char *s, size_t len, const char *word)
{
    return strlen(word) == len && memcmp(s, word, len) == 0;
}

/* Whether one cgroup path component names a container; see the header. */
static int
cgroup_component_id(const char *c, size_t len, char *out)
{
    static const char *const prefixes[] = {
        "", "docker-", "crio-", "cri-containerd-", "libpod-"
    };
    size_t i, plen;

    if (has_suffix(c, len, ".scope")) {
        len -= sizeof(".scope") - 1;
    }
    if (len < SP_CID_HEX || !is_lower_hex(c + len - SP_CID_HEX, SP_CID_HEX)) {
        return 0;
    }
    plen = len - SP_CID_HEX;
    for (i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        if (equals(c, plen, prefixes[i])) {
            break;
        }
    }
    /* containerd's systemd driver: "kubepods-...slice:cri-containerd:<id>" */
    if (i == sizeof(prefixes) / sizeof(prefixes[0])
        && !has_suffix(c, plen, ":cri-containerd:"))
    {
        return 0;
    }
    memcpy(out, c + plen, SP_CID_HEX);
    out[SP_CID_HEX] = '\0';
    return 1;
}

sp_status
sp_container_id_from_cgroup(const char *text, size_t len,
                            char out[SP_CONTAINER_ID_SIZE])
{
    const char *line = text, *end = text + len, *nl, *path, *c, *e;

    while (line < end) {
        nl = memchr(line, '\n', (size_t)(end - line));
        if (nl == NULL) {
            nl = end;
        }
        /* hierarchy-ID:controller-list:cgroup-path; the path may hold ':' */
        path = memchr(line, ':', (size_t)(nl - line));
        if (path != NULL) {
            path = memchr(path + 1, ':', (size_t)(nl - path - 1));
        }
        if (path != NULL && path + 1 < nl && path[1] == '/') {
            /* Deepest component first: nested cgroups belong to it. */
            e = nl;
            while (e > path + 1) {
                c = e;
                while (c[-1] != '/') {
                    c--;
                }
                if (cgroup_component_id(c, (size_t)(e - c), out)) {
                    return SP_OK;
                }
                e = c - 1;
            }
        }
        line = nl + 1;
    }
    return SP_ERR_NOT_FOUND;
}

/*
 * The first 64-hex component of path that follows a "containers" or
 * "*-containers" component and does not follow "sandboxes" directly:
 * containerd's sandboxes/<id> is the pod's, not this container's.
 */
static int
mount_path_id(const char *p, size_t len, char *out)
{
    const char *end = p + len, *c, *e;
    int seen_containers = 0, after_sandboxes = 0;

    for (c = p; c < end; c = e + 1) {
        e = memchr(c, '/', (size_t)(end - c));
        if (e == NULL) {
            e = end;
        }
        if (seen_containers && !after_sandboxes
            && e - c == SP_CID_HEX && is_lower_hex(c, SP_CID_HEX))
        {
            memcpy(out, c, SP_CID_HEX);
            out[SP_CID_HEX] = '\0';
            return 1;
        }
        if (equals(c, (size_t)(e - c), "containers")
            || has_suffix(c, (size_t)(e - c), "-containers"))
        {
            seen_containers = 1;
        }
        after_sandboxes = equals(c, (size_t)(e - c), "sandboxes");
    }
    return 0;
}

/*
 * mountinfo fields are separated by single spaces (blanks inside paths are
 * escaped as \040): id parent major:minor root mount-point options
 * [optional...] - fstype source super-options.
 */
sp_status
sp_container_id_from_mountinfo(const char *text, size_t len,
                               char out[SP_CONTAINER_ID_SIZE])
{
    const char *line = text, *end = text + len, *nl, *f, *fe;
    const char *field[3];
    size_t flen[3], nf, dash;
    char id[SP_CONTAINER_ID_SIZE];
    int found = 0, hostname;

    while (line < end) {
        nl = memchr(line, '\n', (size_t)(end - line));
        if (nl == NULL) {
            nl = end;
        }
        /* Keep root (3), mount point (4) and the source after "-". */
        nf = 0;
        dash = 0;
        field[2] = NULL;
        flen[2] = 0;
        for (f = line; f < nl; f = fe + 1) {
            fe = memchr(f, ' ', (size_t)(nl - f));
            if (fe == NULL) {
                fe = nl;
            }
            if (nf == 3 || nf == 4) {
                field[nf - 3] = f;
                flen[nf - 3] = (size_t)(fe - f);
            } else if (nf >= 6 && dash == 0 && fe - f == 1 && *f == '-') {
                dash = nf;
            } else if (dash != 0 && nf == dash + 2) {
                field[2] = f;
                flen[2] = (size_t)(fe - f);
            }
            nf++;
        }
        line = nl + 1;
        if (nf < 5) {
            continue;
        }

        hostname = equals(field[1], flen[1], "/etc/hostname");
        if ((mount_path_id(field[0], flen[0], id)
             || (field[2] != NULL && mount_path_id(field[2], flen[2], id)))
            && (hostname || !found))
        {
            memcpy(out, id, sizeof(id));
            found = 1;
            if (hostname) {
                return SP_OK;
            }
        }
    }
    return found ? SP_OK : SP_ERR_NOT_FOUND;
}

/* --- detection */

/*
 * Reads a whole file into a NUL-terminated malloc'ed buffer. SP_ERR_IO if
 * it cannot be read. Past SP_PROC_FILE_MAX the text is cut after its last
 * complete line, so that no cut-off path can look like a shorter one.
 */
static sp_status
read_text(const char *path, char **text, size_t *len)
{
    int fd;
    size_t n = 0, cap = 8192;
    ssize_t got;
    char *buf, *tmp;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return SP_ERR_IO;
    }
    buf = malloc(cap);
    if (buf == NULL) {
        close(fd);
        return SP_ERR_NOMEM;
    }
    for ( ;; ) {
        if (n == cap - 1) {
            if (cap >= SP_PROC_FILE_MAX) {
                while (n > 0 && buf[n - 1] != '\n') {
                    n--;
                }
                break;
            }
            tmp = realloc(buf, cap * 2);
            if (tmp == NULL) {
                free(buf);
                close(fd);
                return SP_ERR_NOMEM;
            }
            buf = tmp;
            cap *= 2;
        }
        got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            free(buf);
            close(fd);
            return SP_ERR_IO;
        }
        if (got == 0) {
            break;
        }
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return SP_OK;
}

/* SP_OK with out set, SP_ERR_NOT_FOUND, or SP_ERR_NOMEM. */
static sp_status
detect_container_id(const char *cgroup_path, const char *mountinfo_path,
                    char out[SP_CONTAINER_ID_SIZE])
{
    const char *paths[2];
    char *text;
    size_t len, i;
    sp_status rc;

    paths[0] = cgroup_path != NULL ? cgroup_path : "/proc/self/cgroup";
    paths[1] = mountinfo_path != NULL ? mountinfo_path
                                      : "/proc/self/mountinfo";
    for (i = 0; i < 2; i++) {
        rc = read_text(paths[i], &text, &len);
        if (rc == SP_ERR_NOMEM) {
            return rc;
        }
        if (rc != SP_OK) {
            continue;
        }
        rc = i == 0 ? sp_container_id_from_cgroup(text, len, out)
                    : sp_container_id_from_mountinfo(text, len, out);
        free(text);
        if (rc == SP_OK) {
            return SP_OK;
        }
    }
    return SP_ERR_NOT_FOUND;
}

/*
 * The executable's base name into a malloc'ed *name, or NULL when it
 * cannot be known. Only SP_ERR_NOMEM is an error. argv[0] is never used:
 * nginx overwrites it with its process title.
 */
static sp_status
detect_exe_name(const char *path, char **name)
{
    size_t cap = 256;
    ssize_t n;
    char *buf, *tmp;
    const char *base;

    *name = NULL;
    buf = NULL;
    for ( ;; ) {
        tmp = realloc(buf, cap);
        if (tmp == NULL) {
            free(buf);
            return SP_ERR_NOMEM;
        }
        buf = tmp;
        n = readlink(path, buf, cap);
        if (n < 0) {
            free(buf);
            if (errno != EINVAL) {
                return SP_OK;
            }
            /* Not a symbolic link: the path names the file itself. */
            buf = strdup(path);
            if (buf == NULL) {
                return SP_ERR_NOMEM;
            }
            n = (ssize_t)strlen(buf);
            break;
        }
        if ((size_t)n < cap) {
            buf[n] = '\0';
            break;
        }
        if (cap >= SP_LINK_MAX) {
            free(buf);
            return SP_OK;
        }
        cap *= 2;
    }

    /* The kernel marks a replaced binary (a package upgrade while the
     * server runs) this way; the name is still the program's. */
    if (has_suffix(buf, (size_t)n, " (deleted)")) {
        buf[n - (ssize_t)(sizeof(" (deleted)") - 1)] = '\0';
    }
    base = strrchr(buf, '/');
    base = base != NULL ? base + 1 : buf;
    if (*base != '\0') {
        *name = strdup(base);
        if (*name == NULL) {
            free(buf);
            return SP_ERR_NOMEM;
        }
    }
    free(buf);
    return SP_OK;
}

static int
is_protected_key(const char *key)
{
    return strcmp(key, "process.pid") == 0
           || strncmp(key, "telemetry.sdk.", sizeof("telemetry.sdk.") - 1)
                  == 0;
}

static int
given(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/*
 * OpenTelemetry's default, unknown_service, with the server named as the
 * executable would be for another runtime.
 */
static sp_status
set_default_service_name(sp_resource *r, const char *server)
{
    static const char prefix[] = "unknown_service:";
    char *name;
    size_t len;
    sp_status rc;

    if (!given(server)) {
        return sp_resource_set_string(r, "service.name", "unknown_service");
    }
    len = strlen(server);
    name = malloc(sizeof(prefix) + len);
    if (name == NULL) {
        return SP_ERR_NOMEM;
    }
    memcpy(name, prefix, sizeof(prefix) - 1);
    memcpy(name + sizeof(prefix) - 1, server, len + 1);
    rc = sp_resource_set_string(r, "service.name", name);
    free(name);
    return rc;
}

/* The detected attributes, in the order the header lists them. */
static sp_status
set_detected(sp_resource *r, const sp_resource_input *in)
{
    char host[256], cid[SP_CONTAINER_ID_SIZE], *exe;
    sp_status rc;
    int64_t pid;

    if ((rc = set_default_service_name(r, in->server)) != SP_OK
        || (rc = sp_resource_set_string(r, "telemetry.sdk.name", "spanprof"))
        != SP_OK
        || (rc = sp_resource_set_string(r, "telemetry.sdk.language",
                                        SP_SDK_LANGUAGE)) != SP_OK
        || (rc = sp_resource_set_string(r, "telemetry.sdk.version",
                                        SP_VERSION)) != SP_OK
        || (rc = sp_resource_set_string(r, "telemetry.distro.name",
                                        "spanprof")) != SP_OK
        || (rc = sp_resource_set_string(r, "telemetry.distro.version",
                                        SP_VERSION)) != SP_OK)
    {
        return rc;
    }

    if (given(in->host_name)) {
        rc = sp_resource_set_string(r, "host.name", in->host_name);
    } else if (gethostname(host, sizeof(host)) == 0) {
        /* POSIX leaves a truncated name without its NUL. */
        host[sizeof(host) - 1] = '\0';
        if (host[0] != '\0') {
            rc = sp_resource_set_string(r, "host.name", host);
        }
    }
    if (rc != SP_OK) {
        return rc;
    }

    pid = in->pid > 0 ? in->pid : (int64_t)getpid();
    rc = sp_resource_set_int(r, "process.pid", pid);
    if (rc != SP_OK) {
        return rc;
    }

    rc = detect_exe_name(in->exe_path != NULL ? in->exe_path
                                              : "/proc/self/exe", &exe);
    if (rc != SP_OK) {
        return rc;
    }
    if (exe != NULL) {
        rc = sp_resource_set_string(r, "process.executable.name", exe);
        free(exe);
        if (rc != SP_OK) {
            return rc;
        }
    }

    if (given(in->server)) {
        rc = sp_resource_set_string(r, "process.runtime.name", in->server);
        if (rc != SP_OK) {
            return rc;
        }
    }
    if (given(in->server_version)) {
        rc = sp_resource_set_string(r, "process.runtime.version",
                                    in->server_version);
        if (rc != SP_OK) {
            return rc;
        }
    }

    rc = detect_container_id(in->cgroup_path, in->mountinfo_path, cid);
    if (rc == SP_OK) {
        rc = sp_resource_set_string(r, "container.id", cid);
    }
    return rc == SP_ERR_NOT_FOUND ? SP_OK : rc;
}

sp_status
sp_resource_detect(const sp_resource_input *in, sp_resource **out)
{
    static const sp_resource_input defaults;
    sp_resource *r;
    sp_kvlist *user = NULL;
    const char *key, *value;
    sp_status rc;
    size_t i;

    if (out == NULL) {
        return SP_ERR_INVALID;
    }
    if (in == NULL) {
        in = &defaults;
    }
    if (in->resource_attributes != NULL) {
        rc = sp_kvlist_parse(in->resource_attributes,
                             strlen(in->resource_attributes), &user);
        if (rc == SP_ERR_NOMEM) {
            return rc;
        }
        if (rc != SP_OK) {
            user = NULL;
        }
    }
    rc = sp_resource_create(&r);
    if (rc != SP_OK) {
        sp_kvlist_destroy(user);
        return rc;
    }

    /*
     * Lowest precedence first, each step overwriting the one before:
     * detected values and the default service name, then the user's list,
     * then OTEL_SERVICE_NAME. Only the protected keys are never taken
     * from the list.
     */
    rc = set_detected(r, in);
    for (i = 0; rc == SP_OK && user != NULL && i < sp_kvlist_count(user);
         i++)
    {
        key = sp_kvlist_key(user, i);
        value = sp_kvlist_value(user, i);
        if (value[0] != '\0' && !is_protected_key(key)) {
            rc = sp_resource_set_string(r, key, value);
        }
    }
    if (rc == SP_OK && given(in->service_name)) {
        rc = sp_resource_set_string(r, "service.name", in->service_name);
    }
    sp_kvlist_destroy(user);
    if (rc != SP_OK) {
        sp_resource_destroy(r);
        return rc;
    }
    *out = r;
    return SP_OK;
}
