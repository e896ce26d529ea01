#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sp_test.h"
#include "sp_resource.h"

#define ID_A "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"
#define ID_B "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d"
#define ID_63 "2e7d2c03a9507ae265ecf5b5356885a53393a2029d241394997265a1a25aefc"
#define ID_UPPER \
    "18AC3E7343F016890C510E93F935261169D9E3F565436429830FAF0934F4F8E4"
#define ID_NONHEX \
    "18ac3e7343f016890c510e93f935261169d9e3f565436429830faf0934f4f8eg"
#define POD_UID "7c3c0c5a-1b2e-4b8e-9b1d-2f2d7e9f0a11"
#define POD_SLICE "pod7c3c0c5a_1b2e_4b8e_9b1d_2f2d7e9f0a11.slice"

/* A docker host's own mountinfo: ids only in mount points and options. */
#define HOST_MOUNTINFO \
    "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n" \
    "25 22 0:23 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc " \
    "proc rw\n" \
    "600 22 0:50 / /var/lib/docker/overlay2/" ID_B "/merged rw,relatime " \
    "shared:300 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/" \
    "QX,upperdir=/var/lib/docker/containers/" ID_B "/diff\n" \
    "610 22 0:51 / /var/lib/docker/containers/" ID_A "/mounts/shm " \
    "rw,nosuid,nodev,noexec,relatime shared:310 - tmpfs shm rw,size=65536k\n"

/* Inside a docker container on cgroup v2 (private cgroup namespace). */
#define DOCKER_MOUNTINFO \
    "580 520 0:52 / / rw,relatime master:300 - overlay overlay rw," \
    "upperdir=/var/lib/docker/overlay2/" ID_B "/diff\n" \
    "581 580 0:55 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n" \
    "590 580 254:1 /var/lib/docker/containers/" ID_A "/resolv.conf " \
    "/etc/resolv.conf rw,relatime - ext4 /dev/vda1 rw\n" \
    "591 580 254:1 /var/lib/docker/containers/" ID_A "/hostname " \
    "/etc/hostname rw,relatime - ext4 /dev/vda1 rw\n" \
    "592 580 254:1 /var/lib/docker/containers/" ID_A "/hosts /etc/hosts " \
    "rw,relatime - ext4 /dev/vda1 rw\n"

typedef struct {
    char dir[32];
    char *paths[16];
    size_t n;
} fixture;

static int
setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));

    if (f == NULL) {
        return -1;
    }
    strcpy(f->dir, "/tmp/sp_resource_XXXXXX");
    if (mkdtemp(f->dir) == NULL) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    fixture *f = *state;
    size_t i;

    for (i = 0; i < f->n; i++) {
        unlink(f->paths[i]);
        free(f->paths[i]);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

static char *
new_path(fixture *f, const char *name)
{
    char *path = malloc(sizeof(f->dir) + 32);

    assert_non_null(path);
    assert_true(f->n < sizeof(f->paths) / sizeof(f->paths[0]));
    snprintf(path, sizeof(f->dir) + 32, "%s/%s", f->dir, name);
    f->paths[f->n++] = path;
    return path;
}

static const char *
temp_file(fixture *f, const char *content)
{
    char *path = new_path(f, "fileXXXXXX");
    int fd = mkstemp(path);
    size_t len = strlen(content);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, len), (ssize_t)len);
    close(fd);
    return path;
}

static const char *
temp_symlink(fixture *f, const char *target)
{
    char name[16];
    char *path;

    snprintf(name, sizeof(name), "exe%zu", f->n);
    path = new_path(f, name);
    assert_int_equal(symlink(target, path), 0);
    return path;
}

/* An nginx worker outside any container, every source injected. */
static sp_resource_input
base_input(fixture *f)
{
    sp_resource_input in;

    memset(&in, 0, sizeof(in));
    in.server = "nginx";
    in.server_version = "1.22.1";
    in.pid = 4242;
    in.host_name = "web-1";
    in.exe_path = temp_symlink(f, "/usr/sbin/nginx");
    in.cgroup_path = temp_file(f, "0::/user.slice/user-1000.slice/"
                                  "session-2.scope\n");
    in.mountinfo_path = temp_file(f, HOST_MOUNTINFO);
    return in;
}

static sp_resource *
detect(const sp_resource_input *in)
{
    sp_resource *r = NULL;

    assert_int_equal(sp_resource_detect(in, &r), SP_OK);
    assert_non_null(r);
    return r;
}

/* A string attribute's value, or NULL when the key is absent. */
static const char *
str_of(const sp_resource *r, const char *key)
{
    size_t i;

    if (sp_resource_find(r, key, &i) != SP_OK) {
        return NULL;
    }
    assert_int_equal(sp_resource_type(r, i), SP_ATTR_STRING);
    return sp_resource_string(r, i);
}

static int64_t
int_of(const sp_resource *r, const char *key)
{
    size_t i;

    assert_int_equal(sp_resource_find(r, key, &i), SP_OK);
    assert_int_equal(sp_resource_type(r, i), SP_ATTR_INT);
    return sp_resource_int(r, i);
}

static const char *
cid_cgroup(const char *text, char *out)
{
    sp_status rc = sp_container_id_from_cgroup(text, strlen(text), out);

    return rc == SP_OK ? out : NULL;
}

static const char *
cid_mountinfo(const char *text, char *out)
{
    sp_status rc = sp_container_id_from_mountinfo(text, strlen(text), out);

    return rc == SP_OK ? out : NULL;
}

/* --- the attribute list */

/* What a builder keeps a resource's encoding by (sp_otlp.c). */
static void
version_is_new_at_each_change(void **state)
{
    sp_resource *r, *c;
    uint64_t     v0, v1, v2;

    (void)state;
    assert_int_equal(sp_resource_create(&r), SP_OK);
    v0 = sp_resource_version(r);
    assert_true(v0 != 0);
    assert_int_equal(sp_resource_set_string(r, "a", "1"), SP_OK);
    v1 = sp_resource_version(r);
    assert_true(v1 != 0 && v1 != v0);
    /* the same value set again is still a change */
    assert_int_equal(sp_resource_set_string(r, "a", "1"), SP_OK);
    v2 = sp_resource_version(r);
    assert_true(v2 != v1 && v2 != v0);
    /* a failed set changes nothing */
    assert_int_equal(sp_resource_set_string(r, "", "1"), SP_ERR_INVALID);
    assert_true(sp_resource_version(r) == v2);
    assert_int_equal(sp_resource_copy(r, &c), SP_OK);
    assert_true(sp_resource_version(c) != v2
                && sp_resource_version(c) != v1
                && sp_resource_version(c) != v0);
    sp_resource_destroy(c);
    sp_resource_destroy(r);
}

static void
set_appends_new_keys_and_replaces_in_place(void **state)
{
    sp_resource *r;
    size_t i;

    (void)state;
    assert_int_equal(sp_resource_create(&r), SP_OK);
    assert_int_equal(sp_resource_count(r), 0);
    assert_int_equal(sp_resource_set_string(r, "a", "1"), SP_OK);
    assert_int_equal(sp_resource_set_int(r, "b", -7), SP_OK);
    assert_int_equal(sp_resource_set_string(r, "c", "3"), SP_OK);
    assert_int_equal(sp_resource_count(r), 3);
    assert_string_equal(sp_resource_key(r, 1), "b");
    assert_int_equal(sp_resource_type(r, 1), SP_ATTR_INT);
    assert_int_equal(sp_resource_int(r, 1), -7);
    assert_null(sp_resource_string(r, 1));

    /* Replacing keeps the position and may change the type. */
    assert_int_equal(sp_resource_set_int(r, "a", INT64_MAX), SP_OK);
    assert_int_equal(sp_resource_set_string(r, "b", "two"), SP_OK);
    assert_int_equal(sp_resource_count(r), 3);
    assert_string_equal(sp_resource_key(r, 0), "a");
    assert_int_equal(sp_resource_type(r, 0), SP_ATTR_INT);
    assert_true(sp_resource_int(r, 0) == INT64_MAX);
    assert_null(sp_resource_string(r, 0));
    assert_int_equal(sp_resource_type(r, 1), SP_ATTR_STRING);
    assert_string_equal(sp_resource_string(r, 1), "two");
    assert_int_equal(sp_resource_int(r, 1), 0);

    assert_int_equal(sp_resource_find(r, "c", &i), SP_OK);
    assert_int_equal(i, 2);
    assert_int_equal(sp_resource_find(r, "d", &i), SP_ERR_NOT_FOUND);
    assert_null(sp_resource_key(r, 3));
    sp_resource_destroy(r);
    sp_resource_destroy(NULL);
}

static void
set_rejects_bad_arguments(void **state)
{
    sp_resource *r;

    (void)state;
    assert_int_equal(sp_resource_create(&r), SP_OK);
    assert_int_equal(sp_resource_set_string(r, NULL, "v"), SP_ERR_INVALID);
    assert_int_equal(sp_resource_set_string(r, "", "v"), SP_ERR_INVALID);
    assert_int_equal(sp_resource_set_string(r, "k", NULL), SP_ERR_INVALID);
    assert_int_equal(sp_resource_set_int(r, "", 1), SP_ERR_INVALID);
    assert_int_equal(sp_resource_count(r), 0);
    sp_resource_destroy(r);
}

static void
copy_is_deep(void **state)
{
    sp_resource *r, *c;
    char value[] = "orig";

    (void)state;
    assert_int_equal(sp_resource_create(&r), SP_OK);
    assert_int_equal(sp_resource_set_string(r, "s", value), SP_OK);
    assert_int_equal(sp_resource_set_int(r, "process.pid", 1), SP_OK);
    value[0] = 'X';     /* the resource holds its own copy */
    assert_int_equal(sp_resource_copy(r, &c), SP_OK);
    assert_int_equal(sp_resource_set_int(c, "process.pid", 2), SP_OK);
    assert_int_equal(sp_resource_set_string(c, "s", "changed"), SP_OK);

    assert_string_equal(str_of(r, "s"), "orig");
    assert_int_equal(int_of(r, "process.pid"), 1);
    assert_string_equal(str_of(c, "s"), "changed");
    assert_int_equal(int_of(c, "process.pid"), 2);
    assert_int_equal(sp_resource_count(c), 2);
    sp_resource_destroy(r);
    sp_resource_destroy(c);
}

/* --- container id from /proc/self/cgroup */

static void
cgroup_v1_docker(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    assert_string_equal(cid_cgroup("12:pids:/docker/" ID_A "\n"
                                   "11:memory:/docker/" ID_A "\n"
                                   "1:name=systemd:/docker/" ID_A "\n"
                                   "0::/\n", out), ID_A);
    assert_int_equal(strlen(out), 64);
}

static void
cgroup_v1_kubepods_burstable(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    assert_string_equal(cid_cgroup("12:hugetlb:/\n"
                                   "11:cpuset:/kubepods/burstable/pod"
                                   POD_UID "/" ID_A "\n", out), ID_A);
    assert_string_equal(cid_cgroup("4:memory:/kubepods/pod" POD_UID "/"
                                   ID_B, out), ID_B);
}

static void
cgroup_systemd_docker_scope(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    assert_string_equal(cid_cgroup("1:name=systemd:/system.slice/docker-"
                                   ID_A ".scope\n", out), ID_A);
    assert_string_equal(cid_cgroup("0::/system.slice/docker-" ID_B
                                   ".scope\n", out), ID_B);
}

static void
cgroup_crio_and_containerd(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    assert_string_equal(cid_cgroup("0::/kubepods.slice/kubepods-burstable."
                                   "slice/kubepods-burstable-" POD_SLICE
                                   "/crio-" ID_A ".scope\n", out), ID_A);
    assert_string_equal(cid_cgroup("0::/kubepods.slice/kubepods-besteffort."
                                   "slice/kubepods-besteffort-" POD_SLICE
                                   "/cri-containerd-" ID_B ".scope\n",
                                   out), ID_B);
    assert_string_equal(cid_cgroup("0::/system.slice/containerd.service/"
                                   "kubepods-burstable-" POD_SLICE
                                   ":cri-containerd:" ID_A "\n", out), ID_A);
}

static void
cgroup_podman_libpod(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    assert_string_equal(cid_cgroup("0::/machine.slice/libpod-" ID_A
                                   ".scope\n", out), ID_A);
    /* podman with a "container" sub-cgroup: the scope above it counts. */
    assert_string_equal(cid_cgroup("0::/user.slice/user-1000.slice/"
                                   "user@1000.service/user.slice/libpod-"
                                   ID_B ".scope/container\n", out), ID_B);
    /* conmon, podman's monitor, is not the container */
    assert_null(cid_cgroup("0::/machine.slice/libpod-conmon-" ID_A
                           ".scope\n", out));
}

static void
cgroup_deepest_component_and_first_line_win(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    assert_string_equal(cid_cgroup("3:cpu:/docker/" ID_A "/docker/" ID_B,
                                   out), ID_B);
    assert_string_equal(cid_cgroup("3:cpu:/docker/" ID_B "\n"
                                   "2:memory:/docker/" ID_A "\n", out),
                        ID_B);
}

static void
cgroup_without_a_container(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    assert_null(cid_cgroup("", out));
    assert_null(cid_cgroup("0::/\n", out));
    assert_null(cid_cgroup("0::/init.scope\n", out));
    assert_null(cid_cgroup("0::/user.slice/user-1000.slice/"
                           "session-2.scope\n", out));
    assert_null(cid_cgroup("12:pids:/\n11:memory:/user.slice\n"
                           "1:name=systemd:/user.slice/user-1000.slice/"
                           "user@1000.service/init.scope\n", out));
    assert_null(cid_cgroup("garbage without colons " ID_A "\n", out));
    /* the path must be absolute */
    assert_null(cid_cgroup("0::docker/" ID_A "\n", out));
}

static void
cgroup_ids_must_be_64_lowercase_hex(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    assert_null(cid_cgroup("11:memory:/docker/" ID_63 "\n", out));
    assert_null(cid_cgroup("11:memory:/docker/" ID_A "0\n", out));
    assert_null(cid_cgroup("11:memory:/docker/" ID_UPPER "\n", out));
    assert_null(cid_cgroup("11:memory:/docker/" ID_NONHEX "\n", out));
    assert_null(cid_cgroup("0::/system.slice/docker-" ID_63 ".scope\n",
                           out));
    assert_null(cid_cgroup("0::/system.slice/docker-" ID_UPPER ".scope\n",
                           out));
    assert_null(cid_cgroup("0::/system.slice/docker-" ID_A ".scopex\n",
                           out));
    assert_null(cid_cgroup("0::/system.slice/foo-" ID_A ".scope\n", out));
    assert_null(cid_cgroup("0::/system.slice/docker" ID_A ".scope\n", out));
}

/* --- container id from /proc/self/mountinfo */

static void
mountinfo_docker_hostname(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    assert_string_equal(cid_mountinfo(DOCKER_MOUNTINFO, out), ID_A);
    /* /var/lib/docker on a file system of its own */
    assert_string_equal(cid_mountinfo("591 580 254:16 /containers/" ID_B
                                      "/hostname /etc/hostname rw,relatime "
                                      "shared:4 master:1 - ext4 /dev/vdb rw",
                                      out), ID_B);
}

static void
mountinfo_prefers_the_etc_hostname_line(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    /* A volume from another container's directory comes first. */
    assert_string_equal(cid_mountinfo("590 580 254:1 /var/lib/docker/"
                                      "containers/" ID_B "/logs /logs rw - "
                                      "ext4 /dev/vda1 rw\n"
                                      DOCKER_MOUNTINFO, out), ID_A);
    /* Without a hostname line the first match wins. */
    assert_string_equal(cid_mountinfo("590 580 254:1 /var/lib/docker/"
                                      "containers/" ID_B "/logs /logs rw - "
                                      "ext4 /dev/vda1 rw\n"
                                      "592 580 254:1 /var/lib/docker/"
                                      "containers/" ID_A "/hosts /etc/hosts "
                                      "rw - ext4 /dev/vda1 rw\n", out),
                        ID_B);
}

static void
mountinfo_podman_and_mount_source(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    assert_string_equal(cid_mountinfo("1190 1178 0:103 /home/u/.local/share/"
                                      "containers/storage/overlay-containers/"
                                      ID_A "/userdata/hostname /etc/hostname "
                                      "rw,nosuid,nodev,relatime - tmpfs tmpfs "
                                      "rw\n", out), ID_A);
    assert_string_equal(cid_mountinfo("800 1 0:60 / /etc/hostname rw - none "
                                      "/var/lib/docker/containers/" ID_B
                                      "/hostname rw\n", out), ID_B);
}

static void
mountinfo_skips_sandboxes(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    /* Kubernetes with containerd: hostname is the pod sandbox's. */
    assert_null(cid_mountinfo("700 680 254:1 /var/lib/containerd/"
                              "io.containerd.grpc.v1.cri/sandboxes/" ID_A
                              "/hostname /etc/hostname rw - ext4 /dev/vda1 "
                              "rw\n"
                              "701 680 254:1 /var/lib/kubelet/pods/"
                              POD_UID "/containers/app/1a2b3c4d "
                              "/dev/termination-log rw - ext4 /dev/vda1 rw\n",
                              out));
    assert_null(cid_mountinfo("9 8 0:1 /data/containers/sandboxes/" ID_A
                              "/hostname /etc/hostname rw - ext4 /dev/x rw\n",
                              out));
    assert_string_equal(cid_mountinfo("9 8 0:1 /data/containers/sandboxes/"
                                      ID_A "/hostname /etc/hostname rw - "
                                      "ext4 /dev/x rw\n"
                                      "9 8 0:1 /data/containers/x/" ID_B
                                      "/f /f rw - ext4 /dev/x rw\n", out),
                        ID_B);
}

static void
mountinfo_without_a_container(void **state)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)state;
    /* ids in mount points and super options are the host's view */
    assert_null(cid_mountinfo(HOST_MOUNTINFO, out));
    assert_null(cid_mountinfo("", out));
    assert_null(cid_mountinfo("/var/lib/docker/containers/" ID_A
                              "/hostname\n", out));
}

static void
mountinfo_ids_must_be_64_lowercase_hex(void **state)
{
    static const char *const bad[] = { ID_63, ID_A "0", ID_UPPER, ID_NONHEX };
    char text[512], out[SP_CONTAINER_ID_SIZE];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(text, sizeof(text), "591 580 254:1 /var/lib/docker/"
                 "containers/%s/hostname /etc/hostname rw - ext4 /dev/vda1 "
                 "rw\n", bad[i]);
        assert_null(cid_mountinfo(text, out));
    }
}

/* --- detection */

static void
detects_server_process_and_sdk_attributes(void **state)
{
    sp_resource_input in = base_input(*state);
    sp_resource *r = detect(&in);

    assert_string_equal(str_of(r, "process.runtime.name"), "nginx");
    assert_string_equal(str_of(r, "process.runtime.version"), "1.22.1");
    assert_int_equal(int_of(r, "process.pid"), 4242);
    assert_string_equal(str_of(r, "host.name"), "web-1");
    assert_string_equal(str_of(r, "process.executable.name"), "nginx");
    assert_string_equal(str_of(r, "telemetry.sdk.name"), "spanprof");
    assert_string_equal(str_of(r, "telemetry.sdk.version"), SP_VERSION);
    assert_string_equal(str_of(r, "telemetry.sdk.language"), "cpp");
    assert_string_equal(str_of(r, "telemetry.distro.name"), "spanprof");
    assert_string_equal(str_of(r, "telemetry.distro.version"), SP_VERSION);
    assert_string_equal(str_of(r, "service.name"), "unknown_service:nginx");
    assert_null(str_of(r, "container.id"));
    assert_int_equal(sp_resource_count(r), 11);
    sp_resource_destroy(r);

    in.server = "httpd";
    in.server_version = "2.4.71";
    r = detect(&in);
    assert_string_equal(str_of(r, "process.runtime.name"), "httpd");
    assert_string_equal(str_of(r, "process.runtime.version"), "2.4.71");
    assert_string_equal(str_of(r, "service.name"), "unknown_service:httpd");
    sp_resource_destroy(r);
}

static void
attributes_come_in_the_documented_order(void **state)
{
    static const char *const keys[] = {
        "service.name", "telemetry.sdk.name", "telemetry.sdk.language",
        "telemetry.sdk.version", "telemetry.distro.name",
        "telemetry.distro.version", "host.name", "process.pid",
        "process.executable.name", "process.runtime.name",
        "process.runtime.version", "container.id", "extra"
    };
    sp_resource_input in = base_input(*state);
    sp_resource *r;
    size_t i;

    in.cgroup_path = temp_file(*state, "0::/system.slice/docker-" ID_A
                                       ".scope\n");
    in.resource_attributes = "extra=1,host.name=h";
    r = detect(&in);
    assert_int_equal(sp_resource_count(r), sizeof(keys) / sizeof(keys[0]));
    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        assert_string_equal(sp_resource_key(r, i), keys[i]);
    }
    sp_resource_destroy(r);
}

static void
missing_sources_leave_attributes_out(void **state)
{
    sp_resource_input in = base_input(*state);
    sp_resource *r;

    in.server = NULL;
    in.server_version = "";
    in.exe_path = "/nonexistent/spanprof/exe";
    in.cgroup_path = "/nonexistent/spanprof/cgroup";
    in.mountinfo_path = "/nonexistent/spanprof/mountinfo";
    r = detect(&in);
    assert_null(str_of(r, "process.runtime.name"));
    assert_null(str_of(r, "process.runtime.version"));
    assert_null(str_of(r, "process.executable.name"));
    assert_null(str_of(r, "container.id"));
    assert_string_equal(str_of(r, "service.name"), "unknown_service");
    assert_int_equal(int_of(r, "process.pid"), 4242);
    sp_resource_destroy(r);
}

static void
defaults_read_this_process(void **state)
{
    char host[256];
    sp_resource *r;

    (void)state;
    assert_int_equal(gethostname(host, sizeof(host)), 0);
    host[sizeof(host) - 1] = '\0';
    r = detect(NULL);
    assert_int_equal(int_of(r, "process.pid"), getpid());
    assert_string_equal(str_of(r, "host.name"), host);
    /* /proc/self/exe; argv[0] names the same file when nothing rewrote it */
    assert_string_equal(str_of(r, "process.executable.name"),
                        program_invocation_short_name);
    assert_string_equal(str_of(r, "service.name"), "unknown_service");
    assert_string_equal(str_of(r, "telemetry.sdk.name"), "spanprof");
    sp_resource_destroy(r);
}

static void
pid_and_host_name_default_when_not_given(void **state)
{
    sp_resource_input in = base_input(*state);
    sp_resource *r;
    char host[256];

    assert_int_equal(gethostname(host, sizeof(host)), 0);
    host[sizeof(host) - 1] = '\0';
    in.pid = 0;
    in.host_name = "";
    r = detect(&in);
    assert_int_equal(int_of(r, "process.pid"), getpid());
    assert_string_equal(str_of(r, "host.name"), host);
    sp_resource_destroy(r);
}

static void
executable_name_is_the_link_targets_base_name(void **state)
{
    fixture *f = *state;
    sp_resource_input in = base_input(f);
    sp_resource *r;

    in.exe_path = temp_symlink(f, "/usr/sbin/apache2");
    r = detect(&in);
    assert_string_equal(str_of(r, "process.executable.name"), "apache2");
    sp_resource_destroy(r);

    /* The binary was replaced by an upgrade while the server ran. */
    in.exe_path = temp_symlink(f, "/usr/sbin/nginx (deleted)");
    r = detect(&in);
    assert_string_equal(str_of(r, "process.executable.name"), "nginx");
    sp_resource_destroy(r);

    in.exe_path = temp_symlink(f, "nginx-debug");
    r = detect(&in);
    assert_string_equal(str_of(r, "process.executable.name"), "nginx-debug");
    sp_resource_destroy(r);

    /* Not a link: the file's own name. */
    in.exe_path = temp_file(f, "");
    r = detect(&in);
    assert_string_equal(str_of(r, "process.executable.name"),
                        strrchr(in.exe_path, '/') + 1);
    sp_resource_destroy(r);
}

static void
detects_container_from_cgroup_v1(void **state)
{
    sp_resource_input in = base_input(*state);
    sp_resource *r;

    in.cgroup_path = temp_file(*state, "11:memory:/docker/" ID_A "\n"
                                       "1:name=systemd:/docker/" ID_A "\n");
    r = detect(&in);
    assert_string_equal(str_of(r, "container.id"), ID_A);
    sp_resource_destroy(r);
}

static void
detects_container_from_mountinfo_when_cgroup_says_root(void **state)
{
    sp_resource_input in = base_input(*state);
    sp_resource *r;

    in.cgroup_path = temp_file(*state, "0::/\n");
    in.mountinfo_path = temp_file(*state, DOCKER_MOUNTINFO);
    r = detect(&in);
    assert_string_equal(str_of(r, "container.id"), ID_A);
    sp_resource_destroy(r);

    /* A cgroup id wins over the mountinfo one. */
    in.cgroup_path = temp_file(*state, "0::/system.slice/docker-" ID_B
                                       ".scope\n");
    r = detect(&in);
    assert_string_equal(str_of(r, "container.id"), ID_B);
    sp_resource_destroy(r);

    /* No cgroup file at all: mountinfo still counts. */
    in.cgroup_path = "/nonexistent/spanprof/cgroup";
    r = detect(&in);
    assert_string_equal(str_of(r, "container.id"), ID_A);
    sp_resource_destroy(r);
}

static void
no_container_id_outside_containers(void **state)
{
    sp_resource_input in = base_input(*state);
    sp_resource *r;

    in.cgroup_path = temp_file(*state, "0::/\n");
    r = detect(&in);
    assert_null(str_of(r, "container.id"));
    sp_resource_destroy(r);
}

/* --- service.name and OTEL_RESOURCE_ATTRIBUTES */

static void
service_name_precedence(void **state)
{
    sp_resource_input in = base_input(*state);
    sp_resource *r;

    /* OTEL_SERVICE_NAME > OTEL_RESOURCE_ATTRIBUTES > default */
    in.service_name = "from-env";
    in.resource_attributes = "service.name=from-attrs";
    r = detect(&in);
    assert_string_equal(str_of(r, "service.name"), "from-env");
    assert_string_equal(sp_resource_key(r, 0), "service.name");
    sp_resource_destroy(r);

    in.service_name = NULL;
    r = detect(&in);
    assert_string_equal(str_of(r, "service.name"), "from-attrs");
    sp_resource_destroy(r);

    in.service_name = "";
    r = detect(&in);
    assert_string_equal(str_of(r, "service.name"), "from-attrs");
    sp_resource_destroy(r);

    in.resource_attributes = NULL;
    r = detect(&in);
    assert_string_equal(str_of(r, "service.name"), "unknown_service:nginx");
    sp_resource_destroy(r);

    in.service_name = "from-env";
    r = detect(&in);
    assert_string_equal(str_of(r, "service.name"), "from-env");
    sp_resource_destroy(r);

    /* an empty value in the list is no name */
    in.service_name = NULL;
    in.resource_attributes = "service.name=";
    r = detect(&in);
    assert_string_equal(str_of(r, "service.name"), "unknown_service:nginx");
    sp_resource_destroy(r);
}

static void
resource_attributes_override_detected_values(void **state)
{
    sp_resource_input in = base_input(*state);
    sp_resource *r;

    in.cgroup_path = temp_file(*state, "0::/system.slice/docker-" ID_A
                                       ".scope\n");
    in.resource_attributes = "host.name=edge-7, container.id=" ID_B
                             ",telemetry.distro.name=acme,"
                             "process.runtime.version=1.22.1-custom";
    r = detect(&in);
    assert_string_equal(str_of(r, "host.name"), "edge-7");
    assert_string_equal(str_of(r, "container.id"), ID_B);
    assert_string_equal(str_of(r, "telemetry.distro.name"), "acme");
    assert_string_equal(str_of(r, "process.runtime.version"),
                        "1.22.1-custom");
    assert_int_equal(sp_resource_count(r), 12);
    sp_resource_destroy(r);
}

static void
resource_attributes_cannot_change_pid_or_sdk(void **state)
{
    sp_resource_input in = base_input(*state);
    sp_resource *r;

    in.resource_attributes = "process.pid=1,telemetry.sdk.name=other,"
                             "telemetry.sdk.version=9,"
                             "telemetry.sdk.language=go,"
                             "telemetry.sdk.extra=x,host.name=h2";
    r = detect(&in);
    assert_int_equal(int_of(r, "process.pid"), 4242);
    assert_string_equal(str_of(r, "telemetry.sdk.name"), "spanprof");
    assert_string_equal(str_of(r, "telemetry.sdk.version"), SP_VERSION);
    assert_string_equal(str_of(r, "telemetry.sdk.language"), "cpp");
    assert_null(str_of(r, "telemetry.sdk.extra"));
    /* the rest of the list still applies */
    assert_string_equal(str_of(r, "host.name"), "h2");
    sp_resource_destroy(r);
}

static void
resource_attributes_are_decoded_and_added(void **state)
{
    sp_resource_input in = base_input(*state);
    sp_resource *r;

    in.resource_attributes = " deployment.environment = prod%20eu ,"
                             "team=a%2Cb,team=c,empty=";
    r = detect(&in);
    assert_string_equal(str_of(r, "deployment.environment"), "prod eu");
    /* the last duplicate wins */
    assert_string_equal(str_of(r, "team"), "c");
    assert_null(str_of(r, "empty"));
    assert_int_equal(sp_resource_count(r), 13);
    assert_string_equal(sp_resource_key(r, 11), "deployment.environment");
    assert_string_equal(sp_resource_key(r, 12), "team");
    sp_resource_destroy(r);
}

static void
invalid_resource_attributes_are_ignored_whole(void **state)
{
    static const char *const lists[] = {
        "host.name=evil,deployment.environment=prod,broken",
        "host.name=evil,deployment.environment=%zz",
        "host.name=evil,=x",
        "service.name=evil,host.name=%"
    };
    sp_resource_input in = base_input(*state);
    sp_resource *r;
    size_t i;

    for (i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        in.resource_attributes = lists[i];
        r = detect(&in);
        assert_string_equal(str_of(r, "host.name"), "web-1");
        assert_string_equal(str_of(r, "service.name"),
                            "unknown_service:nginx");
        assert_null(str_of(r, "deployment.environment"));
        assert_int_equal(sp_resource_count(r), 11);
        sp_resource_destroy(r);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(version_is_new_at_each_change),
        cmocka_unit_test(set_appends_new_keys_and_replaces_in_place),
        cmocka_unit_test(set_rejects_bad_arguments),
        cmocka_unit_test(copy_is_deep),
        cmocka_unit_test(cgroup_v1_docker),
        cmocka_unit_test(cgroup_v1_kubepods_burstable),
        cmocka_unit_test(cgroup_systemd_docker_scope),
        cmocka_unit_test(cgroup_crio_and_containerd),
        cmocka_unit_test(cgroup_podman_libpod),
        cmocka_unit_test(cgroup_deepest_component_and_first_line_win),
        cmocka_unit_test(cgroup_without_a_container),
        cmocka_unit_test(cgroup_ids_must_be_64_lowercase_hex),
        cmocka_unit_test(mountinfo_docker_hostname),
        cmocka_unit_test(mountinfo_prefers_the_etc_hostname_line),
        cmocka_unit_test(mountinfo_podman_and_mount_source),
        cmocka_unit_test(mountinfo_skips_sandboxes),
        cmocka_unit_test(mountinfo_without_a_container),
        cmocka_unit_test(mountinfo_ids_must_be_64_lowercase_hex),
        cmocka_unit_test_setup_teardown(
            detects_server_process_and_sdk_attributes, setup, teardown),
        cmocka_unit_test_setup_teardown(
            attributes_come_in_the_documented_order, setup, teardown),
        cmocka_unit_test_setup_teardown(
            missing_sources_leave_attributes_out, setup, teardown),
        cmocka_unit_test(defaults_read_this_process),
        cmocka_unit_test_setup_teardown(
            pid_and_host_name_default_when_not_given, setup, teardown),
        cmocka_unit_test_setup_teardown(
            executable_name_is_the_link_targets_base_name, setup, teardown),
        cmocka_unit_test_setup_teardown(
            detects_container_from_cgroup_v1, setup, teardown),
        cmocka_unit_test_setup_teardown(
            detects_container_from_mountinfo_when_cgroup_says_root, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            no_container_id_outside_containers, setup, teardown),
        cmocka_unit_test_setup_teardown(
            service_name_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(
            resource_attributes_override_detected_values, setup, teardown),
        cmocka_unit_test_setup_teardown(
            resource_attributes_cannot_change_pid_or_sdk, setup, teardown),
        cmocka_unit_test_setup_teardown(
            resource_attributes_are_decoded_and_added, setup, teardown),
        cmocka_unit_test_setup_teardown(
            invalid_resource_attributes_are_ignored_whole, setup, teardown),
    };

    return cmocka_run_group_tests_name("resource", tests, NULL, NULL);
}
