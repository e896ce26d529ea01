#include "sp_test.h"
#include "sp_pprof.h"

#include "perftools/profiles/profile.pb-c.h"

#include <stdio.h>
#include <stdlib.h>

typedef Perftools__Profiles__Profile  Profile;
typedef Perftools__Profiles__Sample   Sample;
typedef Perftools__Profiles__Label    Label;
typedef Perftools__Profiles__Location Location;
typedef Perftools__Profiles__Function Function;
typedef Perftools__Profiles__Mapping  Mapping;

#define PERIOD_NS 10000000ULL

/* ---- reading a profile back */

static Profile *
unpack(const sp_pprof *p)
{
    sp_buf   out = SP_BUF_INIT(0);
    Profile *pr;

    assert_int_equal(sp_pprof_serialize(p, &out), SP_OK);
    assert_int_equal(sp_pprof_size(p), out.len);
    pr = perftools__profiles__profile__unpack(NULL, out.len, out.data);
    assert_non_null(pr);
    sp_buf_free(&out);
    return pr;
}

static const char *
str(const Profile *pr, int64_t i)
{
    assert_true(i >= 0 && (size_t)i < pr->n_string_table);
    return pr->string_table[i];
}

static const Location *
location(const Profile *pr, uint64_t id)
{
    size_t i;

    for (i = 0; i < pr->n_location; i++) {
        if (pr->location[i]->id == id) {
            return pr->location[i];
        }
    }
    fail_msg("no location %llu", (unsigned long long)id);
    return NULL;
}

static const Function *
function(const Profile *pr, uint64_t id)
{
    size_t i;

    for (i = 0; i < pr->n_function; i++) {
        if (pr->function[i]->id == id) {
            return pr->function[i];
        }
    }
    fail_msg("no function %llu", (unsigned long long)id);
    return NULL;
}

static const Mapping *
mapping(const Profile *pr, uint64_t id)
{
    size_t i;

    for (i = 0; i < pr->n_mapping; i++) {
        if (pr->mapping[i]->id == id) {
            return pr->mapping[i];
        }
    }
    fail_msg("no mapping %llu", (unsigned long long)id);
    return NULL;
}

static const Mapping *
mapping_named(const Profile *pr, const char *path)
{
    size_t i;

    for (i = 0; i < pr->n_mapping; i++) {
        if (strcmp(str(pr, pr->mapping[i]->filename), path) == 0) {
            return pr->mapping[i];
        }
    }
    fail_msg("no mapping %s", path);
    return NULL;
}

static size_t
functions_named(const Profile *pr, const char *name)
{
    size_t i, n = 0;

    for (i = 0; i < pr->n_function; i++) {
        if (strcmp(str(pr, pr->function[i]->name), name) == 0) {
            n++;
        }
    }
    return n;
}

/* Writes a sample's labels as "key=value key=#num ..." in their order. */
static void
labels_text(const Profile *pr, const Sample *s, char *out, size_t size)
{
    size_t i, used = 0;
    int    n;

    out[0] = '\0';
    for (i = 0; i < s->n_label; i++) {
        const Label *l = s->label[i];

        assert_int_equal(l->num_unit, 0);
        if (l->str != 0) {
            assert_int_equal(l->num, 0);
            n = snprintf(out + used, size - used, "%s%s=%s", i ? " " : "",
                         str(pr, l->key), str(pr, l->str));
        } else {
            n = snprintf(out + used, size - used, "%s%s=#%lld", i ? " " : "",
                         str(pr, l->key), (long long)l->num);
        }
        assert_true(n > 0 && (size_t)n < size - used);
        used += (size_t)n;
    }
}

/*
 * Writes a sample's stack as "addr:func@file:line;..." leaf first, with
 * the lines of one location joined by '+' (inlined first).
 */
static void
stack_text(const Profile *pr, const Sample *s, char *out, size_t size)
{
    size_t          i, j, used = 0;
    const Location *loc;
    const Function *f;
    int             n;

    out[0] = '\0';
    for (i = 0; i < s->n_location_id; i++) {
        loc = location(pr, s->location_id[i]);
        n = snprintf(out + used, size - used, "%s%llx:", i ? ";" : "",
                     (unsigned long long)loc->address);
        used += (size_t)n;
        for (j = 0; j < loc->n_line; j++) {
            f = function(pr, loc->line[j]->function_id);
            assert_int_equal(f->system_name, f->name);
            n = snprintf(out + used, size - used, "%s%s@%s:%lld",
                         j ? "+" : "", str(pr, f->name),
                         str(pr, f->filename),
                         (long long)loc->line[j]->line);
            assert_true(n > 0 && (size_t)n < size - used);
            used += (size_t)n;
        }
    }
}

static void
assert_strings_unique(const Profile *pr)
{
    size_t i, j;

    assert_true(pr->n_string_table >= 1);
    assert_string_equal(pr->string_table[0], "");
    for (i = 0; i < pr->n_string_table; i++) {
        for (j = i + 1; j < pr->n_string_table; j++) {
            if (strcmp(pr->string_table[i], pr->string_table[j]) == 0) {
                fail_msg("string %zu and %zu are both \"%s\"", i, j,
                         pr->string_table[i]);
            }
        }
    }
}

/* Ids unique and non-zero, references resolve: what pprof checks. */
static void
assert_references_hold(const Profile *pr)
{
    size_t i, j;

    for (i = 0; i < pr->n_location; i++) {
        assert_true(pr->location[i]->id != 0);
        for (j = i + 1; j < pr->n_location; j++) {
            assert_true(pr->location[i]->id != pr->location[j]->id);
        }
        if (pr->location[i]->mapping_id != 0) {
            mapping(pr, pr->location[i]->mapping_id);
        }
        assert_true(pr->location[i]->n_line >= 1);
        for (j = 0; j < pr->location[i]->n_line; j++) {
            function(pr, pr->location[i]->line[j]->function_id);
        }
    }
    for (i = 0; i < pr->n_function; i++) {
        assert_true(pr->function[i]->id != 0);
        for (j = i + 1; j < pr->n_function; j++) {
            assert_true(pr->function[i]->id != pr->function[j]->id);
        }
    }
    for (i = 0; i < pr->n_mapping; i++) {
        assert_true(pr->mapping[i]->id != 0);
        for (j = i + 1; j < pr->n_mapping; j++) {
            assert_true(pr->mapping[i]->id != pr->mapping[j]->id);
        }
    }
    for (i = 0; i < pr->n_sample; i++) {
        assert_int_equal(pr->sample[i]->n_value, 2);
        for (j = 0; j < pr->sample[i]->n_location_id; j++) {
            location(pr, pr->sample[i]->location_id[j]);
        }
    }
}

/* ---- the fixture: a worker with nginx and libc */

static const uint8_t nginx_build_id[20] = {
    0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x00, 0x11,
    0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xff
};
static const uint8_t libc_build_id[4] = { 0xde, 0xad, 0xbe, 0xef };

static const sp_pprof_mapping nginx_map = {
    0x555555554000ULL, 0x555555600000ULL, 0x2000, "/usr/sbin/nginx",
    nginx_build_id, sizeof(nginx_build_id)
};
static const sp_pprof_mapping libc_map = {
    0x7ffff7c00000ULL, 0x7ffff7d80000ULL, 0x28000,
    "/lib/x86_64-linux-gnu/libc.so.6", libc_build_id, sizeof(libc_build_id)
};

static const sp_pprof_line inlined_helper[2] = {
    { "ngx_inner", "src/core/ngx_inner.h", 7 },
    { "ngx_outer", "src/core/ngx_outer.h", 21 },
};

/* epoll_wait in libc without a name; nginx frames named, one inlined. */
static const sp_pprof_frame F_EPOLL = {
    0x7ffff7d1e456ULL, &libc_map, { NULL, NULL, 0 }, NULL, 0
};
static const sp_pprof_frame F_PROCESS = {
    0x555555570010ULL, &nginx_map,
    { "ngx_process_events", "src/event/ngx_event.c", 120 },
    inlined_helper, 2
};
static const sp_pprof_frame F_CYCLE = {
    0x555555580020ULL, &nginx_map,
    { "ngx_worker_process_cycle", "src/os/unix/ngx_process_cycle.c", 790 },
    NULL, 0
};
static const sp_pprof_frame F_MAIN = {
    0x555555560030ULL, &nginx_map, { "main", "src/core/nginx.c", 383 },
    NULL, 0
};
/* Same function as F_PROCESS, another address. */
static const sp_pprof_frame F_PROCESS_2 = {
    0x555555570040ULL, &nginx_map,
    { "ngx_process_events", "src/event/ngx_event.c", 131 }, NULL, 0
};
/* F_CYCLE's address told differently: the first answer stays. */
static const sp_pprof_frame F_CYCLE_AGAIN = {
    0x555555580020ULL, &nginx_map, { "other_name", "other.c", 1 }, NULL, 0
};
/* In no object, and a name without a file. */
static const sp_pprof_frame F_NOWHERE = {
    0xdeadULL, NULL, { NULL, NULL, 0 }, NULL, 0
};
static const sp_pprof_frame F_NO_FILE = {
    0x7ffff7c40000ULL, &libc_map, { "__libc_start_main", NULL, 0 }, NULL, 0
};

static sp_sample
sample_at(uint64_t time_ns, uint64_t period_ns, uint32_t tid,
          const char *name, uint8_t state)
{
    sp_sample s;

    memset(&s, 0, sizeof(s));
    s.time_ns = time_ns;
    s.period_ns = period_ns;
    s.pid = 100;
    s.tid = tid;
    snprintf(s.thread_name, sizeof(s.thread_name), "%s", name);
    s.state = state;
    s.source = SP_SOURCE_SNAPSHOT;
    return s;
}

static sp_pprof *
new_builder(size_t max_bytes)
{
    sp_pprof_options o = { PERIOD_NS, max_bytes };
    sp_pprof        *p = NULL;

    assert_int_equal(sp_pprof_create(&o, &p), SP_OK);
    assert_non_null(p);
    return p;
}

/* Three samples over the fixture; returns the builder. */
static sp_pprof *
three_samples(void)
{
    sp_pprof      *p = new_builder(0);
    sp_sample      s;
    sp_pprof_frame a[3] = { F_PROCESS, F_CYCLE, F_MAIN };
    sp_pprof_frame b[4] = { F_EPOLL, F_PROCESS_2, F_CYCLE, F_MAIN };
    sp_pprof_frame c[4] = { F_NOWHERE, F_CYCLE_AGAIN, F_NO_FILE, F_MAIN };
    int            i;

    s = sample_at(1700000000123456789ULL, 10400000, 4242, "nginx",
                  SP_THREAD_RUNNING);
    s.has_span = true;
    for (i = 0; i < 16; i++) {
        s.trace_id[i] = (uint8_t)(0xA0 + i);
    }
    for (i = 0; i < 8; i++) {
        s.span_id[i] = (uint8_t)(0x0F - i);
    }
    assert_int_equal(sp_pprof_add(p, &s, a, 3), SP_OK);

    /* First sample of its thread: no period of its own. */
    s = sample_at(1700000000100000000ULL, 0, 4243, "", SP_THREAD_BLOCKED);
    s.truncated = true;
    assert_int_equal(sp_pprof_add(p, &s, b, 4), SP_OK);

    s = sample_at(1700000000200999999ULL, 9500000, 7, "worker 2",
                  SP_THREAD_UNKNOWN);
    assert_int_equal(sp_pprof_add(p, &s, c, 4), SP_OK);
    return p;
}

/* ---- tests */

/*
 * A sample whose timer missed expirations (the CPU-time timer fires on
 * the kernel's tick) is one sample of samples/count and weight intervals
 * of cpu/nanoseconds; weight 0 (a struct left zero) is one interval.
 */
static void
cpu_value_is_weight_intervals_count_is_one(void **state)
{
    sp_pprof      *p = new_builder(0);
    sp_sample      s;
    sp_pprof_frame a[2] = { F_PROCESS, F_MAIN };
    Profile       *pr;

    (void)state;
    s = sample_at(1700000000000000000ULL, 4000000, 1, "nginx",
                  SP_THREAD_RUNNING);
    s.weight = 4;
    assert_int_equal(sp_pprof_add(p, &s, a, 2), SP_OK);
    s.weight = 0;
    assert_int_equal(sp_pprof_add(p, &s, a, 2), SP_OK);
    s.weight = SP_SAMPLE_WEIGHT_MAX;
    assert_int_equal(sp_pprof_add(p, &s, a, 2), SP_OK);
    s.weight = SP_SAMPLE_WEIGHT_MAX + 1;
    assert_int_equal(sp_pprof_add(p, &s, a, 2), SP_ERR_INVALID);
    assert_int_equal(sp_pprof_sample_count(p), 3);

    pr = unpack(p);
    assert_int_equal(pr->n_sample, 3);
    assert_int_equal(pr->sample[0]->n_value, 2);
    assert_int_equal(pr->sample[0]->value[0], 1);
    assert_int_equal(pr->sample[0]->value[1], 4 * PERIOD_NS);
    assert_int_equal(pr->sample[1]->value[0], 1);
    assert_int_equal(pr->sample[1]->value[1], PERIOD_NS);
    assert_int_equal(pr->sample[2]->value[0], 1);
    assert_int_equal(pr->sample[2]->value[1],
                     (int64_t)SP_SAMPLE_WEIGHT_MAX * PERIOD_NS);
    /* the period stays the interval: the weight is in the value */
    assert_int_equal(pr->period, PERIOD_NS);
    perftools__profiles__profile__free_unpacked(pr, NULL);
    sp_pprof_destroy(p);
}

static void
profile_round_trips_with_every_field(void **state)
{
    sp_pprof      *p = three_samples();
    Profile       *pr;
    char           text[2048];
    const Mapping *m;

    (void)state;
    assert_int_equal(sp_pprof_sample_count(p), 3);
    assert_int_equal(sp_pprof_frame_count(p), 11);
    pr = unpack(p);
    assert_strings_unique(pr);
    assert_references_hold(pr);

    /* Types and period. */
    assert_int_equal(pr->n_sample_type, 2);
    assert_string_equal(str(pr, pr->sample_type[0]->type), "samples");
    assert_string_equal(str(pr, pr->sample_type[0]->unit), "count");
    assert_string_equal(str(pr, pr->sample_type[1]->type), "cpu");
    assert_string_equal(str(pr, pr->sample_type[1]->unit), "nanoseconds");
    assert_non_null(pr->period_type);
    assert_string_equal(str(pr, pr->period_type->type), "cpu");
    assert_string_equal(str(pr, pr->period_type->unit), "nanoseconds");
    assert_int_equal(pr->period, PERIOD_NS);
    assert_int_equal(pr->time_nanos, 1700000000100000000LL);
    assert_int_equal(pr->duration_nanos, 100999999);

    assert_int_equal(pr->n_sample, 3);
    assert_int_equal(pr->sample[0]->value[0], 1);
    assert_int_equal(pr->sample[0]->value[1], PERIOD_NS);

    /* Stacks, leaf first; inlined calls before their caller. */
    stack_text(pr, pr->sample[0], text, sizeof(text));
    assert_string_equal(text,
        "555555570010:ngx_inner@src/core/ngx_inner.h:7"
        "+ngx_outer@src/core/ngx_outer.h:21"
        "+ngx_process_events@src/event/ngx_event.c:120;"
        "555555580020:ngx_worker_process_cycle"
        "@src/os/unix/ngx_process_cycle.c:790;"
        "555555560030:main@src/core/nginx.c:383");
    stack_text(pr, pr->sample[1], text, sizeof(text));
    assert_string_equal(text,
        "7ffff7d1e456:unknown@unknown:0;"
        "555555570040:ngx_process_events@src/event/ngx_event.c:131;"
        "555555580020:ngx_worker_process_cycle"
        "@src/os/unix/ngx_process_cycle.c:790;"
        "555555560030:main@src/core/nginx.c:383");
    stack_text(pr, pr->sample[2], text, sizeof(text));
    assert_string_equal(text,
        "dead:unknown@unknown:0;"
        "555555580020:ngx_worker_process_cycle"
        "@src/os/unix/ngx_process_cycle.c:790;"
        "7ffff7c40000:__libc_start_main@unknown:0;"
        "555555560030:main@src/core/nginx.c:383");

    /* Labels per SPEC section 5, in order. */
    labels_text(pr, pr->sample[0], text, sizeof(text));
    assert_string_equal(text,
        "source.event.time=#1700000000123 source.event.period=#10 "
        "trace_id=a0a1a2a3a4a5a6a7a8a9aaabacadaeaf span_id=0f0e0d0c0b0a0908 "
        "thread.id=#4242 thread.os.id=#4242 thread.name=nginx "
        "thread.state=running");
    labels_text(pr, pr->sample[1], text, sizeof(text));
    assert_string_equal(text,
        "source.event.time=#1700000000100 source.event.period=#10 "
        "thread.id=#4243 thread.os.id=#4243 thread.state=blocked "
        "thread.stack.truncated=true");
    labels_text(pr, pr->sample[2], text, sizeof(text));
    assert_string_equal(text,
        "source.event.time=#1700000000200 source.event.period=#10 "
        "thread.id=#7 thread.os.id=#7 thread.name=worker 2");

    /* Deduplication: a location per (mapping, address), a function per
     * (name, file); the second answer for an address is not used. */
    assert_int_equal(pr->n_location, 7);
    assert_int_equal(functions_named(pr, "ngx_process_events"), 1);
    assert_int_equal(functions_named(pr, "unknown"), 1);
    assert_int_equal(functions_named(pr, "other_name"), 0);
    assert_int_equal(functions_named(pr, "__libc_start_main"), 1);
    assert_int_equal(pr->n_function, 7);
    assert_int_equal(pr->sample[1]->location_id[2],
                     pr->sample[0]->location_id[1]);
    assert_int_equal(pr->sample[2]->location_id[1],
                     pr->sample[0]->location_id[1]);
    assert_int_equal(location(pr, pr->sample[2]->location_id[0])->mapping_id,
                     0);

    /* Mappings: what the worker had, and what is known of them. */
    assert_int_equal(pr->n_mapping, 2);
    m = mapping_named(pr, "/usr/sbin/nginx");
    assert_int_equal(m->memory_start, 0x555555554000ULL);
    assert_int_equal(m->memory_limit, 0x555555600000ULL);
    assert_int_equal(m->file_offset, 0x2000);
    assert_string_equal(str(pr, m->build_id),
                        "0123456789abcdef00112233445566778899aaff");
    assert_true(m->has_functions);
    assert_true(m->has_filenames);
    assert_true(m->has_line_numbers);
    assert_true(m->has_inline_frames);
    assert_int_equal(location(pr, pr->sample[0]->location_id[0])->mapping_id,
                     m->id);
    m = mapping_named(pr, "/lib/x86_64-linux-gnu/libc.so.6");
    assert_int_equal(m->memory_start, 0x7ffff7c00000ULL);
    assert_int_equal(m->memory_limit, 0x7ffff7d80000ULL);
    assert_int_equal(m->file_offset, 0x28000);
    assert_string_equal(str(pr, m->build_id), "deadbeef");
    assert_false(m->has_functions);
    assert_false(m->has_filenames);
    assert_false(m->has_line_numbers);
    assert_false(m->has_inline_frames);

    perftools__profiles__profile__free_unpacked(pr, NULL);
    sp_pprof_destroy(p);
}

static void
total_frame_count_is_the_frames_of_the_samples(void **state)
{
    sp_pprof      *p = new_builder(0);
    sp_sample      s = sample_at(1, 0, 1, "t", SP_THREAD_RUNNING);
    sp_pprof_frame frames[SP_PPROF_MAX_FRAMES];
    Profile       *pr;
    uint64_t       want = 0, got = 0;
    size_t         i, n;

    (void)state;
    for (i = 0; i < SP_PPROF_MAX_FRAMES; i++) {
        frames[i] = i % 2 ? F_CYCLE : F_MAIN;
        frames[i].address += i;
    }
    for (n = 0; n <= SP_PPROF_MAX_FRAMES; n += 97) {
        assert_int_equal(sp_pprof_add(p, &s, frames, n), SP_OK);
        want += n;
        assert_int_equal(sp_pprof_frame_count(p), want);
    }
    /* Inlined calls do not add frames: a frame is a stack address. */
    frames[0] = F_PROCESS;
    assert_int_equal(sp_pprof_add(p, &s, frames, 1), SP_OK);
    want += 1;
    assert_int_equal(sp_pprof_frame_count(p), want);
    pr = unpack(p);
    for (i = 0; i < pr->n_sample; i++) {
        got += pr->sample[i]->n_location_id;
    }
    assert_int_equal(got, want);
    perftools__profiles__profile__free_unpacked(pr, NULL);
    sp_pprof_destroy(p);
}

/* Many stacks: ids, dedup and table growth hold at the benchmark's shape
 * (30 frames from 1000 distinct stacks). */
static void
thousand_stacks_round_trip(void **state)
{
    enum { STACKS = 1000, DEPTH = 30, SAMPLES = 20000, ADDRS = 3000 };
    static char     names[ADDRS][32];
    sp_pprof_mapping maps[5];
    sp_pprof_frame  frames[DEPTH];
    sp_pprof       *p = new_builder(16u << 20);
    sp_sample       s;
    Profile        *pr;
    uint32_t        x = 1;
    uint32_t       *stack_addr;
    size_t          i, j, k;

    (void)state;
    stack_addr = malloc(sizeof(uint32_t) * STACKS * DEPTH);
    assert_non_null(stack_addr);
    for (i = 0; i < 5; i++) {
        maps[i].start = 0x100000000ULL * (i + 1);
        maps[i].limit = maps[i].start + 0x1000000;
        maps[i].file_offset = 0;
        maps[i].path = i == 0 ? "/usr/sbin/nginx" : "/usr/lib/libx.so";
        maps[i].build_id = NULL;
        maps[i].build_id_len = 0;
    }
    for (i = 0; i < ADDRS; i++) {
        snprintf(names[i], sizeof(names[i]), "fn_%zu", i / 2);
    }
    for (i = 0; i < STACKS * DEPTH; i++) {
        x = x * 1664525 + 1013904223;
        stack_addr[i] = (x >> 8) % ADDRS;
    }
    for (k = 0; k < SAMPLES; k++) {
        i = k % STACKS;
        for (j = 0; j < DEPTH; j++) {
            uint32_t a = stack_addr[i * DEPTH + j];

            memset(&frames[j], 0, sizeof(frames[j]));
            frames[j].mapping = &maps[a % 5];
            frames[j].address = maps[a % 5].start + a * 16;
            frames[j].frame.function = names[a];
            frames[j].frame.file = "f.c";
            frames[j].frame.line = a;
        }
        s = sample_at(1000000 * (k + 1), PERIOD_NS, (uint32_t)(k % 8 + 1),
                      "w", SP_THREAD_RUNNING);
        assert_int_equal(sp_pprof_add(p, &s, frames, DEPTH), SP_OK);
    }
    assert_int_equal(sp_pprof_frame_count(p), (uint64_t)SAMPLES * DEPTH);
    pr = unpack(p);
    assert_int_equal(pr->n_sample, SAMPLES);
    assert_true(pr->n_location <= ADDRS);
    assert_true(pr->n_function <= ADDRS / 2);
    assert_int_equal(pr->n_mapping, 5);
    /* Ids are index + 1 here: check every stack without searching. */
    for (k = 0; k < SAMPLES; k++) {
        const Sample *sm = pr->sample[k];

        i = k % STACKS;
        assert_int_equal(sm->n_location_id, DEPTH);
        for (j = 0; j < DEPTH; j++) {
            uint32_t        a = stack_addr[i * DEPTH + j];
            const Location *loc = pr->location[sm->location_id[j] - 1];

            assert_int_equal(loc->id, sm->location_id[j]);
            assert_int_equal(loc->address, maps[a % 5].start + a * 16);
            assert_int_equal(loc->line[0]->line, a);
            assert_string_equal(
                str(pr, pr->function[loc->line[0]->function_id - 1]->name),
                names[a]);
        }
    }
    perftools__profiles__profile__free_unpacked(pr, NULL);
    sp_pprof_destroy(p);
    free(stack_addr);
}

static void
memory_stays_within_max_bytes(void **state)
{
    sp_pprof      *p = new_builder(SP_PPROF_MIN_MAX_BYTES);
    sp_sample      s = sample_at(5, PERIOD_NS, 1, "t", SP_THREAD_RUNNING);
    sp_pprof_frame f[2];
    char           name[200];
    Profile       *pr;
    size_t         added = 0, i;
    sp_status      rc;

    (void)state;
    assert_true(sp_pprof_memory(p) <= SP_PPROF_MIN_MAX_BYTES);
    for (i = 0; i < 100000; i++) {
        memset(name, 'n', sizeof(name));
        snprintf(name + 150, 50, "%zu", i);
        f[0] = F_MAIN;
        f[0].address = 0x1000 + i;
        f[0].frame.function = name;
        f[1] = F_CYCLE;
        rc = sp_pprof_add(p, &s, f, 2);
        if (rc != SP_OK) {
            break;
        }
        added++;
        assert_true(sp_pprof_memory(p) <= SP_PPROF_MIN_MAX_BYTES);
    }
    assert_int_equal(rc, SP_ERR_TOO_LONG);
    assert_true(added > 10);
    assert_true(sp_pprof_memory(p) <= SP_PPROF_MIN_MAX_BYTES);
    /* The failed add added no sample; what is there is a valid profile. */
    assert_int_equal(sp_pprof_sample_count(p), added);
    assert_int_equal(sp_pprof_frame_count(p), 2 * added);
    pr = unpack(p);
    assert_int_equal(pr->n_sample, added);
    assert_references_hold(pr);
    assert_strings_unique(pr);
    perftools__profiles__profile__free_unpacked(pr, NULL);

    /* A reset keeps the memory and takes samples again. */
    sp_pprof_reset(p);
    assert_int_equal(sp_pprof_sample_count(p), 0);
    assert_int_equal(sp_pprof_frame_count(p), 0);
    assert_true(sp_pprof_memory(p) <= SP_PPROF_MIN_MAX_BYTES);
    assert_int_equal(sp_pprof_add(p, &s, f, 2), SP_OK);
    sp_pprof_destroy(p);

    /* Samples alone fill it too: one stack, many times. */
    p = new_builder(SP_PPROF_MIN_MAX_BYTES);
    f[0] = F_MAIN;
    for (added = 0; added < 100000; added++) {
        rc = sp_pprof_add(p, &s, f, 2);
        if (rc != SP_OK) {
            break;
        }
        assert_true(sp_pprof_memory(p) <= SP_PPROF_MIN_MAX_BYTES);
    }
    assert_int_equal(rc, SP_ERR_TOO_LONG);
    assert_true(added > 100);
    assert_true(sp_pprof_memory(p) <= SP_PPROF_MIN_MAX_BYTES);
    assert_int_equal(sp_pprof_sample_count(p), added);
    pr = unpack(p);
    assert_int_equal(pr->n_sample, added);
    assert_int_equal(pr->n_location, 2);
    perftools__profiles__profile__free_unpacked(pr, NULL);
    sp_pprof_destroy(p);
}

/* Adds n samples of 20 frames over distinct addresses. */
static void
add_many(sp_pprof *p, size_t n, uint64_t base)
{
    sp_pprof_frame f[20];
    sp_sample      s;
    size_t         i, j;

    for (i = 0; i < n; i++) {
        for (j = 0; j < 20; j++) {
            f[j] = j % 2 ? F_CYCLE : F_MAIN;
            f[j].address = base + (i * 20 + j) % 700;
        }
        s = sample_at(base + i, 0, (uint32_t)i, "many", SP_THREAD_RUNNING);
        assert_int_equal(sp_pprof_add(p, &s, f, 20), SP_OK);
    }
}

static void
reset_gives_what_a_new_builder_gives(void **state)
{
    sp_pprof *used = three_samples();
    sp_pprof *fresh = new_builder(0);
    sp_buf    a = SP_BUF_INIT(0), b = SP_BUF_INIT(0);
    sp_sample s = sample_at(77, 3000000, 9, "x", SP_THREAD_RUNNING);
    sp_pprof_frame f[2] = { F_EPOLL, F_MAIN };
    size_t    memory;

    (void)state;
    /* Enough samples for several chunks of encoded samples. */
    add_many(used, 3000, 0x1000);
    memory = sp_pprof_memory(used);
    sp_pprof_reset(used);
    assert_int_equal(sp_pprof_memory(used), memory);
    assert_int_equal(sp_pprof_add(used, &s, f, 2), SP_OK);
    assert_int_equal(sp_pprof_add(fresh, &s, f, 2), SP_OK);
    add_many(used, 2000, 0x9000);
    add_many(fresh, 2000, 0x9000);
    /* The memory held before is used again, not added to. */
    assert_int_equal(sp_pprof_memory(used), memory);
    assert_int_equal(sp_pprof_serialize(used, &a), SP_OK);
    assert_int_equal(sp_pprof_serialize(fresh, &b), SP_OK);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    sp_buf_free(&a);
    sp_buf_free(&b);
    sp_pprof_destroy(used);
    sp_pprof_destroy(fresh);
}

static void
mappings_are_told_apart_by_every_field(void **state)
{
    static const uint8_t other_id[4] = { 0xde, 0xad, 0xbe, 0xee };
    sp_pprof        *p = new_builder(0);
    sp_sample        s = sample_at(1, 0, 1, "t", SP_THREAD_RUNNING);
    sp_pprof_mapping m[6];
    sp_pprof_frame   f[10];
    char             path[64];
    Profile         *pr;
    const Mapping   *mp;
    size_t           i;

    (void)state;
    for (i = 0; i < 6; i++) {
        m[i] = libc_map;
    }
    /* Each differs from libc_map in one field only, and comes right
     * after it: the last mapping seen must not be taken for it. */
    m[1].limit++;
    m[2].file_offset++;
    m[3].path = "/lib/x86_64-linux-gnu/libc.so.7";
    m[4].build_id = other_id;
    m[4].build_id_len = 4;     /* as long as libc's */
    m[5].build_id_len = 3;      /* a prefix of libc's */
    /* libc, m[1], libc, m[2], ... libc, m[5] */
    for (i = 0; i < 10; i++) {
        f[i] = F_NO_FILE;
        f[i].mapping = i % 2 == 0 ? &m[0] : &m[(i + 1) / 2];
        f[i].address += i;
    }
    assert_int_equal(sp_pprof_add(p, &s, f, 10), SP_OK);
    /* Equal values at other addresses (and a path in another buffer) are
     * the same mappings. */
    snprintf(path, sizeof(path), "%s", libc_map.path);
    m[0].path = path;
    for (i = 0; i < 10; i++) {
        f[i].address += 100;
    }
    assert_int_equal(sp_pprof_add(p, &s, f, 10), SP_OK);
    pr = unpack(p);
    assert_int_equal(pr->n_mapping, 6);
    for (i = 0; i < 10; i++) {
        assert_int_equal(location(pr, pr->sample[0]->location_id[i])
                             ->mapping_id,
                         location(pr, pr->sample[1]->location_id[i])
                             ->mapping_id);
    }
    mp = mapping(pr, location(pr, pr->sample[0]->location_id[1])
                         ->mapping_id);
    assert_true(mp->memory_limit == libc_map.limit + 1);
    mp = mapping(pr, location(pr, pr->sample[0]->location_id[3])
                         ->mapping_id);
    assert_true(mp->file_offset == libc_map.file_offset + 1);
    mp = mapping(pr, location(pr, pr->sample[0]->location_id[5])
                         ->mapping_id);
    assert_string_equal(str(pr, mp->filename),
                        "/lib/x86_64-linux-gnu/libc.so.7");
    mp = mapping(pr, location(pr, pr->sample[0]->location_id[7])
                         ->mapping_id);
    assert_string_equal(str(pr, mp->build_id), "deadbeee");
    mp = mapping(pr, location(pr, pr->sample[0]->location_id[9])
                         ->mapping_id);
    assert_string_equal(str(pr, mp->build_id), "deadbe");
    perftools__profiles__profile__free_unpacked(pr, NULL);
    sp_pprof_destroy(p);
}

static void
empty_profile_is_valid(void **state)
{
    sp_pprof *p = new_builder(0);
    Profile  *pr;

    (void)state;
    pr = unpack(p);
    assert_int_equal(pr->n_sample, 0);
    assert_int_equal(pr->n_sample_type, 2);
    assert_int_equal(pr->period, PERIOD_NS);
    assert_int_equal(pr->time_nanos, 0);
    assert_string_equal(pr->string_table[0], "");
    perftools__profiles__profile__free_unpacked(pr, NULL);
    sp_pprof_destroy(p);
}

static void
strings_are_stored_as_valid_utf8(void **state)
{
    sp_pprof      *p = new_builder(0);
    sp_sample      s = sample_at(1, 0, 1, "bad\xff", SP_THREAD_RUNNING);
    sp_pprof_frame f = F_MAIN;
    sp_pprof_frame g = F_CYCLE;
    Profile       *pr;
    char           text[512];

    (void)state;
    f.frame.function = "fn\xc3";
    g.frame.function = "fn\xef\xbf\xbd";    /* what fn\xc3 becomes */
    g.frame.file = f.frame.file;
    assert_int_equal(sp_pprof_add(p, &s, &f, 1), SP_OK);
    assert_int_equal(sp_pprof_add(p, &s, &g, 1), SP_OK);
    pr = unpack(p);
    assert_strings_unique(pr);
    stack_text(pr, pr->sample[0], text, sizeof(text));
    assert_string_equal(text,
                        "555555560030:fn\xef\xbf\xbd@src/core/nginx.c:383");
    /* Both names are one function once sanitized. */
    assert_int_equal(location(pr, pr->sample[0]->location_id[0])
                         ->line[0]->function_id,
                     location(pr, pr->sample[1]->location_id[0])
                         ->line[0]->function_id);
    labels_text(pr, pr->sample[0], text, sizeof(text));
    assert_non_null(strstr(text, "thread.name=bad\xef\xbf\xbd"));
    perftools__profiles__profile__free_unpacked(pr, NULL);
    sp_pprof_destroy(p);
}

static void
bad_arguments_are_refused(void **state)
{
    sp_pprof_options o = { 0, 0 };
    sp_pprof        *p = NULL;
    sp_sample        s = sample_at(1, 0, 1, "t", SP_THREAD_RUNNING);
    sp_pprof_frame   f = F_MAIN;

    (void)state;
    assert_int_equal(sp_pprof_create(&o, &p), SP_ERR_INVALID);
    o.period_ns = 1;
    o.max_bytes = SP_PPROF_MIN_MAX_BYTES - 1;
    assert_int_equal(sp_pprof_create(&o, &p), SP_ERR_INVALID);
    assert_int_equal(sp_pprof_create(NULL, &p), SP_ERR_INVALID);
    assert_null(p);
    p = new_builder(0);
    assert_int_equal(sp_pprof_add(p, NULL, &f, 1), SP_ERR_INVALID);
    assert_int_equal(sp_pprof_add(p, &s, NULL, 1), SP_ERR_INVALID);
    assert_int_equal(sp_pprof_add(p, &s, &f, SP_PPROF_MAX_FRAMES + 1),
                     SP_ERR_INVALID);
    f.inline_count = 1;
    assert_int_equal(sp_pprof_add(p, &s, &f, 1), SP_ERR_INVALID);
    {
        static const uint8_t long_id[SP_PPROF_BUILD_ID_MAX + 1];
        sp_pprof_mapping     m = libc_map;

        f = F_MAIN;
        m.build_id = long_id;
        m.build_id_len = sizeof(long_id);
        f.mapping = &m;
        assert_int_equal(sp_pprof_add(p, &s, &f, 1), SP_ERR_INVALID);
        m.build_id_len = SP_PPROF_BUILD_ID_MAX;
        assert_int_equal(sp_pprof_add(p, &s, &f, 1), SP_OK);
        sp_pprof_reset(p);
        f = F_MAIN;
    }
    assert_int_equal(sp_pprof_sample_count(p), 0);
    assert_int_equal(sp_pprof_add(p, &s, NULL, 0), SP_OK);
    assert_int_equal(sp_pprof_sample_count(p), 1);
    assert_string_equal(sp_pprof_thread_state(SP_THREAD_RUNNING), "running");
    assert_string_equal(sp_pprof_thread_state(SP_THREAD_BLOCKED), "blocked");
    assert_null(sp_pprof_thread_state(SP_THREAD_UNKNOWN));
    assert_null(sp_pprof_thread_state(0));
    sp_pprof_destroy(p);
    sp_pprof_destroy(NULL);
}

static void
serialize_respects_the_output_limit(void **state)
{
    sp_pprof *p = three_samples();
    sp_buf    out = SP_BUF_INIT(100);

    (void)state;
    sp_buf_append(&out, "abc", 3);
    assert_int_equal(sp_pprof_serialize(p, &out), SP_ERR_TOO_LONG);
    assert_int_equal(out.len, 3);
    sp_buf_free(&out);
    sp_pprof_destroy(p);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(profile_round_trips_with_every_field),
        cmocka_unit_test(cpu_value_is_weight_intervals_count_is_one),
        cmocka_unit_test(total_frame_count_is_the_frames_of_the_samples),
        cmocka_unit_test(thousand_stacks_round_trip),
        cmocka_unit_test(memory_stays_within_max_bytes),
        cmocka_unit_test(reset_gives_what_a_new_builder_gives),
        cmocka_unit_test(mappings_are_told_apart_by_every_field),
        cmocka_unit_test(empty_profile_is_valid),
        cmocka_unit_test(strings_are_stored_as_valid_utf8),
        cmocka_unit_test(bad_arguments_are_refused),
        cmocka_unit_test(serialize_respects_the_output_limit),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
