/*
 * The exporter loop on an in-memory region with the console exporter and a
 * fake clock: what is drained, when it is sent, how it is counted.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sp_test.h"
#include "sp_test_child.h"
#include "sp_test_grpc.h"
#include "sp_config.h"
#include "sp_exporter.h"
#include "sp_otlp.h"
#include "sp_otlp_client.h"
#include "sp_otlp_json.h"
#include "sp_record.h"
#include "sp_ring.h"

typedef struct fixture {
    void             *mem;
    size_t            size;
    sp_region        *region;
    sp_ring          *ring;
    sp_config        *config;
    sp_exporter_loop *e;
    uint64_t          now;
    char              path[64];
    /* When not 0: the ring's bytes pending while a pass reads it, the
     * clock counting the times it sees another number than 0 or this. */
    uint64_t          pending_expect;
    unsigned          pending_other;
} fixture;

static const char *const *test_env;

static const char *
env(void *ctx, const char *name)
{
    (void)ctx;
    for (size_t i = 0; test_env != NULL && test_env[i] != NULL; i += 2) {
        if (strcmp(test_env[i], name) == 0) {
            return test_env[i + 1];
        }
    }
    return NULL;
}

static uint64_t
fake_now(void *ctx)
{
    fixture         *f = ctx;
    sp_ring_counters c;

    if (f->pending_expect != 0) {
        sp_ring_stats(f->ring, &c);
        if (c.pending_bytes != 0 && c.pending_bytes != f->pending_expect) {
            f->pending_other++;
        }
    }
    return f->now;
}

static void
setup_with(fixture *f, const char *const *vars)
{
    sp_exporter_options o;
    char                err[256];
    int                 fd;

    memset(f, 0, sizeof(*f));
    f->size = sp_region_size(2, 1 << 16);
    assert_int_equal(posix_memalign(&f->mem, 64, f->size), 0);
    assert_int_equal(sp_region_init(f->mem, f->size, 2, 1 << 16), SP_OK);
    assert_int_equal(sp_region_attach(f->mem, f->size, &f->region), SP_OK);
    f->ring = sp_region_claim(f->region, (uint32_t)getpid());
    assert_non_null(f->ring);

    test_env = vars;
    f->config = sp_config_create(SP_SERVER_NGINX);
    sp_config_complete(f->config, env, NULL, NULL, NULL);

    snprintf(f->path, sizeof(f->path), "/tmp/sp-test-exporter-XXXXXX");
    fd = mkstemp(f->path);
    assert_true(fd >= 0);
    close(fd);

    memset(&o, 0, sizeof(o));
    o.config = f->config;
    o.region = f->region;
    o.server = "nginx";
    o.console_path = f->path;
    o.pid = (uint32_t)getpid() + 1;     /* not the writer */
    o.debug_dirs = "";
    o.now_ms = fake_now;
    o.clock_ctx = f;
    f->now = 1000;
    assert_int_equal(sp_exporter_create(&o, &f->e, err, sizeof(err)), SP_OK);
}

static void
teardown(fixture *f)
{
    sp_exporter_destroy(f->e);
    sp_config_destroy(f->config);
    sp_region_detach(f->region);
    free(f->mem);
    unlink(f->path);
}

static char *
console_text(const fixture *f)
{
    static char text[1 << 20];
    FILE       *fp = fopen(f->path, "r");
    size_t      n;

    assert_non_null(fp);
    n = fread(text, 1, sizeof(text) - 1, fp);
    text[n] = '\0';
    fclose(fp);
    return text;
}

static void
write_sample(fixture *f, uint8_t source)
{
    static const uint64_t frames[2] = { 0x1000, 0x2000 };
    uint64_t  buf[64];
    sp_sample s;

    memset(&s, 0, sizeof(s));
    s.time_ns = 1700000000000000000ull;
    s.pid = 4242;
    s.tid = 7;
    s.source = source;
    s.state = SP_THREAD_RUNNING;
    s.frame_count = 2;
    s.frames = frames;
    sp_sample_encode(buf, &s);
    assert_int_equal(sp_ring_write(f->ring, SP_RECORD_SAMPLE, buf,
                                   sp_sample_size(2)), SP_OK);
}

static void
write_span_of(sp_ring *ring, uint8_t n, uint32_t pid)
{
    uint64_t       buf[64];
    sp_span_record s;

    memset(&s, 0, sizeof(s));
    s.trace_id[0] = 0xab;
    s.span_id[7] = n;
    s.kind = SP_SPAN_KIND_SERVER;
    s.pid = pid;
    s.start_ns = 1;
    s.end_ns = 2;
    s.name = "GET";
    s.name_len = 3;
    sp_span_encode(buf, &s, NULL, 0);
    assert_int_equal(sp_ring_write(ring, SP_RECORD_SPAN, buf,
                                   sp_span_size(&s, NULL, 0)), SP_OK);
}

static void
write_span_to(sp_ring *ring, uint8_t n)
{
    write_span_of(ring, n, 4242);
}

static void
write_span(fixture *f, uint8_t n)
{
    write_span_to(f->ring, n);
}

/*
 * An entry span of more than 128 bytes (the builder's usual case), span id
 * n, and, unless how is 0, its framing broken under a right checksum:
 * 1, the last attribute's length runs past the end; 2, no flags' tag.
 */
static void
write_entry_span(sp_ring *ring, uint8_t n, int how)
{
    static const sp_span_attr attrs[] = {
        { "http.request.method", 19, SP_VALUE_STRING, "GET", 3, 0 },
        { "url.path", 8, SP_VALUE_STRING, "/index.html", 11, 0 },
        { "user_agent.original", 19, SP_VALUE_STRING, "ApacheBench/2.3",
          15, 0 },
        { "http.response.status_code", 25, SP_VALUE_INT, NULL, 0, 200 },
    };
    uint64_t       buf[64];
    uint8_t       *p = (uint8_t *)buf;
    sp_span_record s;
    size_t         len, i, last = 0;

    memset(&s, 0, sizeof(s));
    s.trace_id[0] = 0xab;
    s.span_id[7] = n;
    s.parent_span_id[0] = 0xcd;
    s.kind = SP_SPAN_KIND_SERVER;
    s.pid = 4242;
    s.start_ns = 1;
    s.end_ns = 2;
    s.name = "GET /";
    s.name_len = 5;
    len = sp_span_size(&s, attrs, 4);
    assert_true(len > 8 + 128 && len <= sizeof(buf));
    sp_span_encode(buf, &s, attrs, 4);
    /* head, ids, parent, name, kind, times: the first attribute */
    for (i = 8 + 18 + 10 + 10 + 2 + 5 + 2 + 18; p[i] == 0x4a;
         i += 2 + p[i + 1])
    {
        last = i;
    }
    assert_int_equal(i, len - 6);
    if (how == 1) {
        p[last + 1] += 20;
    } else if (how == 2) {
        p[len - 6] = 0x7a;
    }
    assert_int_equal(sp_ring_write(ring, SP_RECORD_SPAN, buf, len), SP_OK);
}

static uint64_t
received(fixture *f)
{
    sp_exporter_counters c;

    sp_exporter_counters_get(f->e, &c);
    return c.received;
}

static size_t
count(const char *text, const char *needle)
{
    size_t n = 0;

    for (const char *p = strstr(text, needle); p != NULL;
         p = strstr(p + 1, needle))
    {
        n++;
    }
    return n;
}

static void
profiles_wait_for_the_export_interval(void **state)
{
    static const char *const vars[] = {
        "OTEL_LOGS_EXPORTER", "console", "OTEL_TRACES_EXPORTER", "console",
        "SPLUNK_PROFILER_EXPORT_INTERVAL", "500", NULL };
    sp_exporter_counters c;
    fixture f;

    (void)state;
    setup_with(&f, vars);
    write_sample(&f, SP_SOURCE_SNAPSHOT);
    write_sample(&f, SP_SOURCE_SNAPSHOT);
    write_sample(&f, SP_SOURCE_CONTINUOUS);
    assert_int_equal(sp_exporter_step(f.e), 3);
    assert_true(sp_exporter_wait_idle(f.e, 5000));
    assert_string_equal(console_text(&f), "");
    sp_exporter_counters_get(f.e, &c);
    assert_int_equal(c.held, 3);

    f.now += 500;
    sp_exporter_step(f.e);
    assert_true(sp_exporter_wait_idle(f.e, 5000));
    /* One record per (worker, source), in one request. */
    assert_int_equal(count(console_text(&f), "\"resourceLogs\""), 1);
    assert_int_equal(count(console_text(&f), "\"logRecords\""), 1);
    assert_int_equal(count(console_text(&f), "\"stringValue\":\"snapshot\""),
                     1);
    assert_int_equal(count(console_text(&f),
                           "\"stringValue\":\"continuous\""), 1);
    assert_non_null(strstr(console_text(&f),
        "{\"key\":\"process.pid\",\"value\":{\"intValue\":\"4242\"}}"));
    sp_exporter_counters_get(f.e, &c);
    assert_int_equal(c.received, 3);
    assert_int_equal(c.exported, 3);
    assert_int_equal(c.held, 0);
    assert_int_equal(c.requests, 1);
    teardown(&f);
}

static void
spans_go_in_batches_or_after_the_delay(void **state)
{
    static const char *const vars[] = {
        "OTEL_LOGS_EXPORTER", "console", "OTEL_TRACES_EXPORTER", "console",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2", "OTEL_BSP_SCHEDULE_DELAY",
        "300", NULL };
    sp_exporter_counters c;
    fixture f;

    (void)state;
    setup_with(&f, vars);
    write_span(&f, 1);
    write_span(&f, 2);
    write_span(&f, 3);
    sp_exporter_step(f.e);
    assert_true(sp_exporter_wait_idle(f.e, 5000));
    /* A full batch at once; the third waits for the delay. */
    assert_int_equal(count(console_text(&f), "\"resourceSpans\""), 1);
    assert_int_equal(count(console_text(&f), "\"spanId\""), 2);
    f.now += 300;
    sp_exporter_step(f.e);
    assert_true(sp_exporter_wait_idle(f.e, 5000));
    assert_int_equal(count(console_text(&f), "\"spanId\""), 3);
    assert_non_null(strstr(console_text(&f),
        "\"traceId\":\"ab000000000000000000000000000000\""));
    assert_non_null(strstr(console_text(&f), "\"kind\":2"));
    sp_exporter_counters_get(f.e, &c);
    assert_int_equal(c.exported, 3);
    assert_int_equal(c.requests, 2);
    teardown(&f);
}

static void
none_and_corrupt_records_are_counted(void **state)
{
    static const char *const vars[] = {
        "OTEL_LOGS_EXPORTER", "none", "OTEL_TRACES_EXPORTER", "console",
        NULL };
    sp_exporter_counters c;
    uint8_t garbage[64];
    fixture f;

    (void)state;
    setup_with(&f, vars);
    memset(garbage, 0xff, sizeof(garbage));
    write_sample(&f, SP_SOURCE_SNAPSHOT);
    assert_int_equal(sp_ring_write(f.ring, SP_RECORD_SPAN, garbage,
                                   sizeof(garbage)), SP_OK);
    assert_int_equal(sp_ring_write(f.ring, SP_RECORD_SAMPLE, garbage,
                                   sizeof(garbage)), SP_OK);
    sp_exporter_step(f.e);
    sp_exporter_flush(f.e);
    assert_true(sp_exporter_wait_idle(f.e, 5000));
    sp_exporter_counters_get(f.e, &c);
    assert_int_equal(c.received, 3);
    assert_int_equal(c.dropped_corrupt, 2);
    assert_int_equal(c.dropped_disabled, 1);
    assert_int_equal(c.received, c.exported + c.dropped_corrupt
                     + c.dropped_disabled + c.held);
    assert_string_equal(console_text(&f), "");
    teardown(&f);
}

/*
 * A dead worker's ring is drained and freed, but its owner is looked up
 * in /proc at most every 500 ms, not on every pass.
 */
static void
a_dead_owner_is_checked_for_at_most_twice_a_second(void **state)
{
    static const char *const vars[] = {
        "OTEL_LOGS_EXPORTER", "none", "OTEL_TRACES_EXPORTER", "none", NULL };
    fixture  f;
    pid_t    child = spawn_sleeper();
    sp_ring *theirs;

    (void)state;
    setup_with(&f, vars);
    assert_int_equal(sp_exporter_step(f.e), 0);
    theirs = sp_region_claim(f.region, (uint32_t)child);
    assert_non_null(theirs);
    write_span_to(theirs, 1);
    assert_int_equal(sp_exporter_step(f.e), 1);
    write_span_to(theirs, 2);
    end_child(child);
    /* dead, but its check is not due: drained, still its */
    f.now += 499;
    assert_int_equal(sp_exporter_step(f.e), 1);
    assert_int_equal(sp_ring_owner(theirs), (uint32_t)child);
    f.now += 1;
    assert_int_equal(sp_exporter_step(f.e), 0);
    assert_int_equal(sp_ring_owner(theirs), 0);
    assert_int_equal(received(&f), 2);
    /* a live owner stays */
    assert_int_equal(sp_ring_owner(f.ring), (uint32_t)getpid());
    teardown(&f);
}

/*
 * Only slots in use are drained: a new worker's claim is seen at the next
 * pass; a slot written without a claim (nothing does that but this test)
 * only when every slot is looked at again, once a second.
 */
static void
rings_are_found_by_their_claims(void **state)
{
    static const char *const vars[] = {
        "OTEL_LOGS_EXPORTER", "none", "OTEL_TRACES_EXPORTER", "none", NULL };
    fixture  f;
    pid_t    child = spawn_sleeper();
    sp_ring *other;

    (void)state;
    setup_with(&f, vars);
    assert_int_equal(sp_exporter_step(f.e), 0);
    other = sp_region_ring(f.region, 1);
    assert_ptr_not_equal(other, f.ring);
    write_span_to(other, 1);
    assert_int_equal(sp_exporter_step(f.e), 0);
    f.now += 999;
    assert_int_equal(sp_exporter_step(f.e), 0);
    f.now += 1;
    assert_int_equal(sp_exporter_step(f.e), 1);
    /* free and empty again: dropped, until claimed */
    assert_int_equal(sp_exporter_step(f.e), 0);
    assert_ptr_equal(sp_region_claim(f.region, (uint32_t)child), other);
    write_span_to(other, 2);
    assert_int_equal(sp_exporter_step(f.e), 1);
    write_span_to(other, 3);
    assert_int_equal(sp_exporter_step(f.e), 1);
    assert_int_equal(received(&f), 3);
    end_child(child);
    teardown(&f);
}

/*
 * sp_exporter_run sleeps after a pass unless it left a backlog: a ring
 * that gave its whole budget or more than a quarter of its bytes.
 */
static void
a_pass_that_drained_a_quarter_of_a_ring_is_a_backlog(void **state)
{
    static const char *const vars[] = {
        "OTEL_LOGS_EXPORTER", "none", "OTEL_TRACES_EXPORTER", "none", NULL };
    fixture f;
    size_t  per, n, i;

    (void)state;
    setup_with(&f, vars);
    per = (sp_span_size(&(sp_span_record){ .name = "GET", .name_len = 3 },
                        NULL, 0)
           + SP_RING_HEADER_SIZE + 7) / 8 * 8;
    n = (1 << 16) / 4 / per;        /* a quarter of the fixture's ring */
    for (i = 0; i < 3; i++) {
        write_span(&f, (uint8_t)i);
    }
    assert_int_equal(sp_exporter_step(f.e), 3);
    assert_false(sp_exporter_backlog(f.e));
    for (i = 0; i < n; i++) {
        write_span(&f, (uint8_t)i);
    }
    assert_int_equal(sp_exporter_step(f.e), n);
    assert_false(sp_exporter_backlog(f.e));
    for (i = 0; i < n + 1; i++) {
        write_span(&f, (uint8_t)i);
    }
    assert_int_equal(sp_exporter_step(f.e), n + 1);
    assert_true(sp_exporter_backlog(f.e));
    assert_int_equal(sp_exporter_step(f.e), 0);
    assert_false(sp_exporter_backlog(f.e));
    teardown(&f);
}

static void
json_escapes_and_rejects_garbage(void **state)
{
    sp_buf  out = SP_BUF_INIT(0);
    uint8_t bad[] = { 0x0a, 0x05, 0xff };

    (void)state;
    assert_int_equal(sp_otlp_json_append(&out, SP_OTLP_SIGNAL_LOGS, bad,
                                         sizeof(bad)), SP_ERR_INVALID);
    assert_int_equal(out.len, 0);
    assert_int_equal(sp_otlp_json_append(&out, SP_OTLP_SIGNAL_TRACES, "", 0),
                     SP_OK);
    assert_int_equal(out.len, 3);
    assert_memory_equal(out.data, "{}\n", 3);
    sp_buf_free(&out);
}

/*
 * OTLP to a receiver that refuses the first call (UNAVAILABLE, retryable):
 * the queued request goes again, the same bytes (the item keeps its
 * reference; nothing is serialized or copied again), and is counted once.
 */
static void
a_retry_sends_the_request_it_queued(void **state)
{
    static const int script[] = { GRPC_STATUS_UNAVAILABLE, GRPC_STATUS_OK };
    sp_exporter_counters c;
    sp_buf               json = SP_BUF_INIT(0);
    test_grpc            s;
    fixture              f;

    (void)state;
    sp_otlp_init(NULL, NULL);
    test_grpc_start(&s, script, 2);
    {
        const char *const vars[] = {
            "OTEL_LOGS_EXPORTER", "none", "OTEL_TRACES_EXPORTER", "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", s.endpoint,
            /* retries wait at most an export interval */
            "SPLUNK_PROFILER_EXPORT_INTERVAL", "100",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "3", NULL };

        setup_with(&f, vars);
    }
    write_span(&f, 1);
    write_span(&f, 2);
    write_span(&f, 3);
    sp_exporter_step(f.e);
    assert_true(sp_exporter_wait_idle(f.e, 10000));
    sp_exporter_counters_get(f.e, &c);
    assert_int_equal(c.exported, 3);
    assert_int_equal(c.requests, 1);
    assert_int_equal(c.failures[SP_GRPC_UNAVAILABLE], 1);
    assert_int_equal(c.held, 0);
    assert_int_equal(c.queue_bytes, 0);
    teardown(&f);
    test_grpc_stop(&s);

    assert_int_equal(s.answered, 2);
    assert_true(s.got_len[0] > 0);
    assert_int_equal(s.got_len[1], s.got_len[0]);
    assert_memory_equal(s.got[1], s.got[0], s.got_len[0]);
    assert_int_equal(sp_otlp_json_append(&json, SP_OTLP_SIGNAL_TRACES,
                                         s.got[1], s.got_len[1]), SP_OK);
    assert_int_equal(sp_buf_append(&json, "", 1), SP_OK);
    assert_int_equal(count((const char *)json.data, "\"spanId\""), 3);
    sp_buf_free(&json);
    test_grpc_free(&s);
    sp_otlp_shutdown();
}

/*
 * A span that does not fit in the traces request being built (one
 * process too many: SP_OTLP_MAX_RESOURCES) pushes that request, then goes
 * into the next: its record in the ring stays the exporter's until then.
 * Freed with the records pushed, writers could write over it while it was
 * copied. Each pass reads a span of a new process and one more of it;
 * the clock, which the pass reads as the span starts a request, sees both
 * records pending, or none once the pass is done.
 */
/*
 * A span whose framing is bad among good ones of its worker, which the
 * exporter checks on the copy it puts into the request: dropped and
 * counted, and nothing of it in the request.
 */
static void
a_badly_framed_span_among_good_ones_is_dropped(void **state)
{
    static const char *const vars[] = {
        "OTEL_LOGS_EXPORTER", "none", "OTEL_TRACES_EXPORTER", "console",
        NULL };
    sp_exporter_counters c;
    fixture f;

    (void)state;
    setup_with(&f, vars);
    write_entry_span(f.ring, 1, 0);
    write_entry_span(f.ring, 2, 1);
    write_entry_span(f.ring, 3, 0);
    write_entry_span(f.ring, 4, 2);
    write_entry_span(f.ring, 5, 0);
    sp_exporter_step(f.e);
    sp_exporter_flush(f.e);
    assert_true(sp_exporter_wait_idle(f.e, 5000));
    sp_exporter_counters_get(f.e, &c);
    assert_int_equal(c.received, 5);
    assert_int_equal(c.dropped_corrupt, 2);
    assert_int_equal(c.exported, 3);
    assert_int_equal(count(console_text(&f), "\"resourceSpans\""), 1);
    assert_int_equal(count(console_text(&f), "\"spanId\""), 3);
    assert_non_null(strstr(console_text(&f),
                           "\"spanId\":\"0000000000000001\""));
    assert_null(strstr(console_text(&f), "\"spanId\":\"0000000000000002\""));
    assert_non_null(strstr(console_text(&f),
                           "\"spanId\":\"0000000000000003\""));
    assert_null(strstr(console_text(&f), "\"spanId\":\"0000000000000004\""));
    assert_non_null(strstr(console_text(&f),
                           "\"spanId\":\"0000000000000005\""));
    teardown(&f);
}

static void
a_span_is_kept_in_the_ring_until_it_is_taken(void **state)
{
    static const char *const vars[] = {
        "OTEL_LOGS_EXPORTER", "none", "OTEL_TRACES_EXPORTER", "none",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100000",
        "OTEL_BSP_MAX_QUEUE_SIZE", "100000", NULL };
    sp_exporter_counters c;
    sp_ring_counters     rc;
    fixture              f;
    uint32_t             pid;

    (void)state;
    setup_with(&f, vars);
    for (pid = 1; pid <= SP_OTLP_MAX_RESOURCES + 1; pid++) {
        write_span_of(f.ring, 1, pid);
        write_span_of(f.ring, 2, pid);
        sp_ring_stats(f.ring, &rc);
        f.pending_expect = rc.pending_bytes;
        assert_int_equal(sp_exporter_step(f.e), 2);
        f.pending_expect = 0;
    }
    sp_exporter_counters_get(f.e, &c);
    /* the request of SP_OTLP_MAX_RESOURCES processes was pushed */
    assert_int_equal(c.dropped_disabled, 2 * SP_OTLP_MAX_RESOURCES);
    assert_int_equal(c.held, 2);
    assert_int_equal(f.pending_other, 0);
    teardown(&f);
}

static void *
run_exporter(void *e)
{
    sp_exporter_run(e);
    return NULL;
}

/*
 * The counters of an exporter that has stopped (the at-exit line): the
 * rings' refusals once it gave the region up are the next reader's time,
 * not counted as its own.
 */
static void
rings_are_counted_until_the_region_is_given_up(void **state)
{
    static const char *const vars[] = {
        "OTEL_LOGS_EXPORTER", "none", "OTEL_TRACES_EXPORTER", "none",
        /* the stop reads on for half of it while the writer lives */
        "OTEL_EXPORTER_OTLP_TIMEOUT", "200", NULL };
    static const uint64_t body[4];
    sp_exporter_counters c;
    sp_ring_counters     rc;
    pthread_t            t;
    fixture              f;

    (void)state;
    setup_with(&f, vars);
    assert_int_equal(pthread_create(&t, NULL, run_exporter, f.e), 0);
    sp_exporter_stop(f.e);
    assert_int_equal(pthread_join(t, NULL), 0);
    while (sp_ring_write(f.ring, SP_RECORD_SPAN, body, sizeof(body))
           == SP_OK)
    {
    }
    sp_ring_stats(f.ring, &rc);
    assert_true(rc.dropped_full > 0);
    sp_exporter_counters_get(f.e, &c);
    assert_int_equal(c.ring_full, 0);
    teardown(&f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(profiles_wait_for_the_export_interval),
        cmocka_unit_test(spans_go_in_batches_or_after_the_delay),
        cmocka_unit_test(none_and_corrupt_records_are_counted),
        cmocka_unit_test(a_badly_framed_span_among_good_ones_is_dropped),
        cmocka_unit_test(a_dead_owner_is_checked_for_at_most_twice_a_second),
        cmocka_unit_test(rings_are_found_by_their_claims),
        cmocka_unit_test(a_pass_that_drained_a_quarter_of_a_ring_is_a_backlog),
        cmocka_unit_test(json_escapes_and_rejects_garbage),
        cmocka_unit_test(a_retry_sends_the_request_it_queued),
        cmocka_unit_test(a_span_is_kept_in_the_ring_until_it_is_taken),
        cmocka_unit_test(rings_are_counted_until_the_region_is_given_up),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
