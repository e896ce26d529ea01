package Spanprof::Settings;

# Every setting of SPEC section 1 with its environment variable, its
# directive in each server, values that must pass the configuration test and
# values that must fail it. The tests of both servers read this one table.

use strict;
use warnings;

use Exporter 'import';
our @EXPORT_OK = qw(settings);

my $DURATION_BAD = ['0', 'fast', '1.5', '-1'];

sub settings {
    my (%arg) = @_;
    my $cert = $arg{certificate};
    return (
        ['OTEL_SDK_DISABLED', 'spanprof', 'Spanprof',
         ['on', 'off'], ['maybe', 'disabled']],
        ['SPLUNK_SNAPSHOT_PROFILER_ENABLED', 'spanprof_snapshot',
         'SpanprofSnapshot', ['on', 'off', 'true'], ['yes', '1']],
        ['SPLUNK_SNAPSHOT_SELECTION_PROBABILITY',
         'spanprof_snapshot_selection_probability',
         'SpanprofSnapshotSelectionProbability',
         ['0.01', '0.10', '0.5'], ['0', '-0.1', 'one', '1e-3']],
        ['SPLUNK_SNAPSHOT_SAMPLING_INTERVAL',
         'spanprof_snapshot_sampling_interval',
         'SpanprofSnapshotSamplingInterval',
         ['1', '10ms', '1000', '1s'], ['0', '1001', '2s', 'fast']],
        ['SPLUNK_PROFILER_ENABLED', 'spanprof_profiler', 'SpanprofProfiler',
         ['on', 'off'], ['enabled']],
        ['SPLUNK_PROFILER_CALL_STACK_INTERVAL',
         'spanprof_profiler_call_stack_interval',
         'SpanprofProfilerCallStackInterval',
         ['1000', '10s'], [@$DURATION_BAD, '3601s']],
        ['SPLUNK_PROFILER_LOGS_ENDPOINT', 'spanprof_profiler_logs_endpoint',
         'SpanprofProfilerLogsEndpoint',
         ['http://127.0.0.1:4317', 'https://ingest.example.com',
          '127.0.0.1:4317'],
         ['ftp://x', 'http://host:99999', '127.0.0.1']],
        ['OTEL_EXPORTER_OTLP_ENDPOINT', 'spanprof_otlp_endpoint',
         'SpanprofOtlpEndpoint', ['http://collector:4317'],
         # a host longer than the exporter takes
         ['collector', 'http://', 'http://' . ('a' x 256) . ':4317']],
        ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
         'spanprof_otlp_traces_endpoint', 'SpanprofOtlpTracesEndpoint',
         ['http://[::1]:4317/'],
         ['http://[1::2::3]:4317', 'grpc://collector:4317']],
        ['OTEL_EXPORTER_OTLP_HEADERS', 'spanprof_otlp_headers',
         'SpanprofOtlpHeaders', ['X-SF-Token=abc,team=a%20b'],
         ['X-SF-Token', '=abc', 'k=%zz']],
        ['OTEL_EXPORTER_OTLP_TIMEOUT', 'spanprof_otlp_timeout',
         'SpanprofOtlpTimeout', ['10000', '5s'], $DURATION_BAD],
        ['OTEL_EXPORTER_OTLP_CERTIFICATE', 'spanprof_otlp_certificate',
         'SpanprofOtlpCertificate', [$cert],
         ["$cert.missing", $arg{no_certificate} // ()]],
        ['OTEL_EXPORTER_OTLP_INSECURE', 'spanprof_otlp_insecure',
         'SpanprofOtlpInsecure', ['on', 'off'], ['yes']],
        ['OTEL_SERVICE_NAME', 'spanprof_service_name', 'SpanprofServiceName',
         ['shop-frontend'], ['""']],
        ['OTEL_RESOURCE_ATTRIBUTES', 'spanprof_resource_attributes',
         'SpanprofResourceAttributes',
         ['deployment.environment=prod,team=web'], ['novalue', 'a=b,=c']],
        ['OTEL_TRACES_EXPORTER', 'spanprof_traces_exporter',
         'SpanprofTracesExporter', ['otlp', 'console', 'none'],
         ['zipkin', 'OTLP']],
        ['OTEL_LOGS_EXPORTER', 'spanprof_logs_exporter',
         'SpanprofLogsExporter', ['otlp', 'console', 'none'], ['kafka']],
        ['OTEL_TRACES_SAMPLER', 'spanprof_traces_sampler',
         'SpanprofTracesSampler',
         ['always_on', 'always_off', 'traceidratio',
          'parentbased_always_on', 'parentbased_always_off',
          'parentbased_traceidratio'], ['sometimes', 'ratio']],
        ['OTEL_TRACES_SAMPLER_ARG', 'spanprof_traces_sampler_arg',
         'SpanprofTracesSamplerArg', ['0', '0.25', '1'], ['1.5', 'half']],
        ['OTEL_PROPAGATORS', 'spanprof_propagators', 'SpanprofPropagators',
         ['tracecontext,baggage', 'baggage', 'none'],
         ['b3', 'none,baggage']],
        ['SPLUNK_PROFILER_EXPORT_INTERVAL',
         'spanprof_profiler_export_interval',
         'SpanprofProfilerExportInterval', ['1000', '500ms'], $DURATION_BAD],
        ['OTEL_BSP_SCHEDULE_DELAY', 'spanprof_bsp_schedule_delay',
         'SpanprofBspScheduleDelay', ['5000'], $DURATION_BAD],
        ['OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
         'spanprof_bsp_max_export_batch_size',
         'SpanprofBspMaxExportBatchSize', ['512'], ['0', '1000001', '1k']],
        ['OTEL_BSP_MAX_QUEUE_SIZE', 'spanprof_bsp_max_queue_size',
         'SpanprofBspMaxQueueSize', ['2048'], ['0', 'many']],
        ['SPLUNK_PROFILER_MAX_STACK_DEPTH',
         'spanprof_profiler_max_stack_depth', 'SpanprofProfilerMaxStackDepth',
         ['128', '1024'], ['0', '1025']],
        ['OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS',
         'spanprof_http_known_methods', 'SpanprofHttpKnownMethods',
         ['GET,POST,PURGE', 'PROPFIND'], ['GET,', 'GET/POST', '""']],
    );
}

1;
