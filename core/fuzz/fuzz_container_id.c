/*
 * Fuzzes the container-id parsers with the same bytes as a cgroup file
 * and as a mountinfo file. Invariants checked beyond "no crash":
 * - a found id is 64 lowercase hex digits, NUL-terminated, taken from the
 *   input;
 * - a complete line without an id in front of the text changes nothing;
 * - the first 64 bytes, put where an id belongs in a docker cgroup line
 *   and a docker hostname mount, are found exactly when they are 64
 *   lowercase hex digits.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sp_resource.h"

typedef sp_status (*parser)(const char *, size_t, char *);

static int
is_id(const char *s)
{
    size_t i;

    for (i = 0; i < 64; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
            return 0;
        }
    }
    return s[64] == '\0';
}

/* Runs f, checks the result's form, returns whether an id was found. */
static int
run(parser f, const char *text, size_t len, char *out)
{
    sp_status rc;

    memset(out, 'Z', SP_CONTAINER_ID_SIZE);
    rc = f(text, len, out);
    if (rc == SP_ERR_NOT_FOUND) {
        return 0;
    }
    if (rc != SP_OK || !is_id(out) || memmem(text, len, out, 64) == NULL) {
        abort();
    }
    return 1;
}

static void
check_prefix_line(parser f, const char *line, const uint8_t *data,
                  size_t size)
{
    char a[SP_CONTAINER_ID_SIZE], b[SP_CONTAINER_ID_SIZE], *text;
    size_t n = strlen(line);
    int fa, fb;

    text = malloc(n + size);
    if (text == NULL) {
        return;
    }
    memcpy(text, line, n);
    memcpy(text + n, data, size);
    fa = run(f, (const char *)data, size, a);
    fb = run(f, text, n + size, b);
    if (fa != fb || (fa && strcmp(a, b) != 0)) {
        abort();
    }
    free(text);
}

static void
check_planted(parser f, const char *before, const char *after,
              const uint8_t *data)
{
    char text[256], out[SP_CONTAINER_ID_SIZE], cand[SP_CONTAINER_ID_SIZE];
    size_t n = strlen(before), m = strlen(after);
    int found;

    memcpy(cand, data, 64);
    cand[64] = '\0';
    memcpy(text, before, n);
    memcpy(text + n, data, 64);
    memcpy(text + n + 64, after, m);
    found = run(f, text, n + 64 + m, out);
    if (found != is_id(cand) || (found && strcmp(out, cand) != 0)) {
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char out[SP_CONTAINER_ID_SIZE];

    (void)run(sp_container_id_from_cgroup, (const char *)data, size, out);
    (void)run(sp_container_id_from_mountinfo, (const char *)data, size, out);

    check_prefix_line(sp_container_id_from_cgroup,
                      "0::/user.slice/session-1.scope\n", data, size);
    check_prefix_line(sp_container_id_from_mountinfo,
                      "22 1 254:1 / / rw - ext4 /dev/vda1 rw\n", data, size);

    if (size >= 64) {
        check_planted(sp_container_id_from_cgroup,
                      "0::/system.slice/docker-", ".scope\n", data);
        check_planted(sp_container_id_from_cgroup,
                      "11:memory:/docker/", "", data);
        check_planted(sp_container_id_from_mountinfo,
                      "591 580 254:1 /var/lib/docker/containers/",
                      "/hostname /etc/hostname rw - ext4 /dev/vda1 rw\n",
                      data);
    }
    return 0;
}
