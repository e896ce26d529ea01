/*
 * spanprof-dump: the profiles in OTLP/JSON lines, for a person without a
 * backend. Reads what the console exporter (OTEL_*_EXPORTER=console), the
 * demo's receiver or the Collector's file exporter wrote, and prints
 * which traces have profiles, folded stacks, a top table or an SVG flame
 * graph, for one trace or all. The work is in sp_dump.h and sp_flame.h;
 * this is the command line.
 */
#include "sp_dump.h"
#include "sp_flame.h"
#include "sp_percent.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
"usage: spanprof-dump [OPTION]... [FILE]...\n"
"Reads OTLP/JSON lines (spanprof's console exporter, the Collector's file\n"
"exporter) from each FILE, or standard input for none or \"-\", and prints\n"
"the profiles they hold.\n"
"\n"
"What to print (default --list):\n"
"  --list            the traces that have profiles, most samples first\n"
"  --spans           with --list: each trace's spans as a tree, with the\n"
"                    samples of each span\n"
"  --folded          folded stacks, root first: \"main;f;g 12\"\n"
"  --top[=N]         the N (default 20) functions with the most self\n"
"                    value, with their total value\n"
"  --svg=FILE        an SVG flame graph into FILE (\"-\": standard output)\n"
"\n"
"Which samples:\n"
"  --trace=ID        of trace ID (32 hex digits) only\n"
"  --span=ID         of span ID (16 hex digits) only\n"
"  --service=NAME    of service.name NAME only\n"
"  --source=snapshot|continuous\n"
"  --value=samples|cpu   count samples (default) or CPU time\n"
"  --by-service      put each stack under a frame named after its service\n"
"\n"
"  --strict          stop at the first line that is not OTLP/JSON (by\n"
"                    default it is skipped with a warning)\n"
"  --help\n"
"\n"
"Exit status: 0, 1 when input could not be read, 2 for bad usage.\n";

typedef enum mode { MODE_LIST, MODE_FOLDED, MODE_TOP, MODE_SVG } mode;

typedef struct args {
    mode           what;
    bool           spans, strict;
    long           top_n;
    const char    *svg_path;
    sp_dump_filter filter;
} args;

static const char *
status_text(sp_status rc)
{
    switch (rc) {
    case SP_OK:            return "ok";
    case SP_ERR_INVALID:   return "not OTLP/JSON";
    case SP_ERR_TOO_LONG:  return "too large";
    case SP_ERR_NOMEM:     return "out of memory";
    default:               return "error";
    }
}

static int
fail(const char *what)
{
    fprintf(stderr, "spanprof-dump: %s\n", what);
    return 1;
}

/* Every line of one file into d. 0, or 1 after saying what went wrong. */
static int
read_file(sp_dump *d, const char *path, const args *a)
{
    FILE     *in = stdin;
    char     *line = NULL;
    size_t    cap = 0;
    ssize_t   len;
    unsigned long n = 0;
    sp_status rc;
    int       status = 0;

    if (strcmp(path, "-") != 0) {
        in = fopen(path, "r");
        if (in == NULL) {
            fprintf(stderr, "spanprof-dump: %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    while ((len = getline(&line, &cap, in)) >= 0) {
        n++;
        if (len > 0 && line[len - 1] == '\n') {
            len--;
        }
        rc = sp_dump_add_line(d, line, (size_t)len);
        if (rc == SP_OK) {
            continue;
        }
        fprintf(stderr, "spanprof-dump: %s:%lu: %s%s\n", path, n,
                status_text(rc), rc == SP_ERR_INVALID && !a->strict
                                 ? ", skipped" : "");
        if (rc != SP_ERR_INVALID || a->strict) {
            status = 1;
            break;
        }
    }
    if (ferror(in)) {
        fprintf(stderr, "spanprof-dump: %s: %s\n", path, strerror(errno));
        status = 1;
    }
    free(line);
    if (in != stdin) {
        fclose(in);
    }
    return status;
}

static void
print_value(int64_t v, sp_dump_value value)
{
    if (value == SP_DUMP_VALUE_CPU_NS) {
        printf("%10.2fms", (double)v / 1e6);
    } else {
        printf("%12lld", (long long)v);
    }
}

static int
print_top(const sp_dump *d, const args *a)
{
    sp_dump_row *rows;
    size_t       n, i;
    int64_t      sum;

    if (sp_dump_top(d, &a->filter, &rows, &n, &sum) != SP_OK) {
        return fail("out of memory");
    }
    printf("%12s %7s %12s %7s  %s\n", "self", "self%", "total", "total%",
           "function");
    for (i = 0; i < n && (long)i < a->top_n; i++) {
        print_value(rows[i].self, a->filter.value);
        printf(" %6.2f%% ", sum ? 100.0 * (double)rows[i].self / sum : 0.0);
        print_value(rows[i].total, a->filter.value);
        printf(" %6.2f%%  %s\n",
               sum ? 100.0 * (double)rows[i].total / sum : 0.0, rows[i].name);
    }
    printf("%zu functions, %zu shown; all samples: ", n,
           n < (size_t)a->top_n ? n : (size_t)a->top_n);
    print_value(sum, a->filter.value);
    printf("\n");
    free(rows);
    return 0;
}

/* The spans under parent ("" for the roots: spans whose parent was not
   read), each line indented by depth. */
static void
print_span_tree(const sp_dump_span *s, size_t n, const char *parent,
                int depth)
{
    size_t i, j;
    bool   known;

    for (i = 0; i < n; i++) {
        if (*parent == '\0') {
            known = false;
            for (j = 0; j < n && *s[i].parent_span_id; j++) {
                known |= strcmp(s[j].span_id, s[i].parent_span_id) == 0;
            }
            if (known) {
                continue;
            }
        } else if (strcmp(s[i].parent_span_id, parent) != 0) {
            continue;
        }
        printf("  %*s%s  %s  span %s  %.1f ms  %lld samples\n", 2 * depth, "",
               *s[i].service ? s[i].service : "-", s[i].name, s[i].span_id,
               s[i].end_ns > s[i].start_ns
               ? (double)(s[i].end_ns - s[i].start_ns) / 1e6 : 0.0,
               (long long)s[i].samples);
        if (depth < 64) {
            print_span_tree(s, n, s[i].span_id, depth + 1);
        }
    }
}

static int
print_list(const sp_dump *d, const args *a)
{
    sp_dump_trace *t;
    sp_dump_span  *s;
    size_t         n, ns, i;

    if (sp_dump_traces(d, &a->filter, &t, &n) != SP_OK) {
        return fail("out of memory");
    }
    for (i = 0; i < n; i++) {
        if (a->filter.trace_id != NULL
            && strcasecmp(a->filter.trace_id, t[i].trace_id) != 0)
        {
            continue;
        }
        printf("trace %s  samples %lld  cpu %.2f ms  spans %zu\n",
               t[i].trace_id, (long long)t[i].samples,
               (double)t[i].cpu_ns / 1e6, t[i].spans);
        if (a->spans && sp_dump_spans(d, t[i].trace_id, &s, &ns) == SP_OK) {
            print_span_tree(s, ns, "", 0);
            free(s);
        }
    }
    if (n == 0) {
        printf("no trace has profile samples\n");
    }
    free(t);
    return 0;
}

static int
print_folded_or_svg(const sp_dump *d, const args *a)
{
    sp_buf           folded = SP_BUF_INIT(0), svg = SP_BUF_INIT(0);
    sp_flame_options fo;
    char             title[128];
    FILE            *out = stdout;
    int              status = 0;

    if (sp_dump_folded(d, &a->filter, &folded) != SP_OK) {
        return fail("out of memory");
    }
    if (a->what == MODE_FOLDED) {
        fwrite(folded.data, 1, folded.len, stdout);
        sp_buf_free(&folded);
        return 0;
    }
    snprintf(title, sizeof(title), "%s%s",
             a->filter.trace_id ? "trace " : "spanprof profile",
             a->filter.trace_id ? a->filter.trace_id : "");
    memset(&fo, 0, sizeof(fo));
    fo.title = title;
    fo.unit = a->filter.value == SP_DUMP_VALUE_CPU_NS ? "ns" : "samples";
    if (sp_flame_svg(&svg, (const char *)folded.data, folded.len, &fo)
        != SP_OK)
    {
        status = fail("out of memory");
    } else {
        if (strcmp(a->svg_path, "-") != 0) {
            out = fopen(a->svg_path, "w");
        }
        if (out == NULL || fwrite(svg.data, 1, svg.len, out) != svg.len
            || (out != stdout && fclose(out) != 0))
        {
            fprintf(stderr, "spanprof-dump: %s: %s\n", a->svg_path,
                    strerror(errno));
            status = 1;
        }
    }
    sp_buf_free(&folded);
    sp_buf_free(&svg);
    return status;
}

static bool
hex_id(const char *s, size_t digits)
{
    size_t i;

    if (strlen(s) != digits) {
        return false;
    }
    for (i = 0; i < digits; i++) {
        if (sp_hex_value(s[i]) < 0) {
            return false;
        }
    }
    return true;
}

/* The position of arg among names (NULL-terminated), or -1. */
static int
choose(const char *arg, const char *const *names)
{
    int i;

    for (i = 0; names[i] != NULL; i++) {
        if (strcmp(arg, names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

static int
usage_error(const char *what)
{
    fprintf(stderr, "spanprof-dump: %s\nTry 'spanprof-dump --help'.\n", what);
    return 2;
}

enum { OPT_LIST = 256, OPT_SPANS, OPT_FOLDED, OPT_TOP, OPT_SVG, OPT_TRACE,
       OPT_SPAN, OPT_SERVICE, OPT_SOURCE, OPT_VALUE, OPT_BY_SERVICE,
       OPT_STRICT, OPT_HELP };

static const struct option options[] = {
    { "list", no_argument, NULL, OPT_LIST },
    { "spans", no_argument, NULL, OPT_SPANS },
    { "folded", no_argument, NULL, OPT_FOLDED },
    { "top", optional_argument, NULL, OPT_TOP },
    { "svg", required_argument, NULL, OPT_SVG },
    { "trace", required_argument, NULL, OPT_TRACE },
    { "span", required_argument, NULL, OPT_SPAN },
    { "service", required_argument, NULL, OPT_SERVICE },
    { "source", required_argument, NULL, OPT_SOURCE },
    { "value", required_argument, NULL, OPT_VALUE },
    { "by-service", no_argument, NULL, OPT_BY_SERVICE },
    { "strict", no_argument, NULL, OPT_STRICT },
    { "help", no_argument, NULL, OPT_HELP },
    { NULL, 0, NULL, 0 }
};

static const char *const sources[] = { "snapshot", "continuous", NULL };
static const char *const values[] = { "samples", "cpu", NULL };

static int
parse_args(int argc, char **argv, args *a)
{
    char *end;
    int   c, modes = 0;

    memset(a, 0, sizeof(*a));
    a->top_n = 20;
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (c) {
        case OPT_LIST:   a->what = MODE_LIST; modes++; break;
        case OPT_SPANS:  a->spans = true; break;
        case OPT_FOLDED: a->what = MODE_FOLDED; modes++; break;
        case OPT_TOP:
            a->what = MODE_TOP;
            modes++;
            if (optarg != NULL) {
                errno = 0;
                a->top_n = strtol(optarg, &end, 10);
                if (errno != 0 || *end != '\0' || a->top_n <= 0) {
                    return usage_error("--top wants a positive number");
                }
            }
            break;
        case OPT_SVG:
            a->what = MODE_SVG;
            a->svg_path = optarg;
            modes++;
            break;
        case OPT_TRACE:
            if (!hex_id(optarg, 32)) {
                return usage_error("--trace wants 32 hex digits");
            }
            a->filter.trace_id = optarg;
            break;
        case OPT_SPAN:
            if (!hex_id(optarg, 16)) {
                return usage_error("--span wants 16 hex digits");
            }
            a->filter.span_id = optarg;
            break;
        case OPT_SERVICE: a->filter.service = optarg; break;
        case OPT_SOURCE:
            /* In the order of sp_dump_source, after ANY. */
            c = choose(optarg, sources);
            if (c < 0) {
                return usage_error("--source is snapshot or continuous");
            }
            a->filter.source = (sp_dump_source)(c + 1);
            break;
        case OPT_VALUE:
            c = choose(optarg, values);    /* the order of sp_dump_value */
            if (c < 0) {
                return usage_error("--value is samples or cpu");
            }
            a->filter.value = (sp_dump_value)c;
            break;
        case OPT_BY_SERVICE: a->filter.service_root = true; break;
        case OPT_STRICT: a->strict = true; break;
        case OPT_HELP:
            fputs(usage_text, stdout);
            return -1;
        default:
            return usage_error("unknown option");
        }
    }
    if (modes > 1) {
        return usage_error("one of --list, --folded, --top, --svg");
    }
    return 0;
}

int
main(int argc, char **argv)
{
    args      a;
    sp_dump  *d;
    int       status = 0, i, rc;

    rc = parse_args(argc, argv, &a);
    if (rc != 0) {
        return rc < 0 ? 0 : rc;
    }
    if (sp_dump_create(NULL, &d) != SP_OK) {
        return fail("out of memory");
    }
    if (optind == argc) {
        status = read_file(d, "-", &a);
    }
    for (i = optind; i < argc && status == 0; i++) {
        status = read_file(d, argv[i], &a);
    }
    if (status == 0) {
        sp_dump_stats st;

        sp_dump_get_stats(d, &st);
        if (st.profiles_bad > 0) {
            fprintf(stderr, "spanprof-dump: %llu of %llu profiles did not "
                    "decode and were skipped\n",
                    (unsigned long long)st.profiles_bad,
                    (unsigned long long)st.profiles);
        }
        switch (a.what) {
        case MODE_LIST: status = print_list(d, &a); break;
        case MODE_TOP:  status = print_top(d, &a); break;
        default:        status = print_folded_or_svg(d, &a); break;
        }
    }
    sp_dump_destroy(d);
    return status;
}
