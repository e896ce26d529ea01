/*
 * The configuration model of SPEC section 1.
 *
 * Every setting has an environment variable and a directive in each
 * server's language. The adapter creates one sp_config when it reads its
 * configuration, feeds it each directive it meets (sp_config_set_directive),
 * then calls sp_config_complete, which takes the environment for every
 * setting no directive set. Precedence: directive, then environment
 * variable, then default.
 *
 * A bad directive value is an error (the adapter fails the configuration
 * test with the message this module writes); a bad environment value is a
 * warning and the default stays. Both messages come from
 * sp_config_invalid_message, so nginx and httpd say the same thing.
 */
#ifndef SP_CONFIG_H
#define SP_CONFIG_H

#include "sp_common.h"

typedef enum sp_server {
    SP_SERVER_NGINX,
    SP_SERVER_HTTPD
} sp_server;

typedef enum sp_setting {
    SP_SETTING_ENABLED,                 /* OTEL_SDK_DISABLED, inverted */
    SP_SETTING_SNAPSHOT_PROFILER_ENABLED,
    SP_SETTING_SNAPSHOT_SELECTION_PROBABILITY,
    SP_SETTING_SNAPSHOT_SAMPLING_INTERVAL,
    SP_SETTING_PROFILER_ENABLED,
    SP_SETTING_PROFILER_CALL_STACK_INTERVAL,
    SP_SETTING_PROFILER_LOGS_ENDPOINT,
    SP_SETTING_OTLP_ENDPOINT,
    SP_SETTING_OTLP_TRACES_ENDPOINT,
    SP_SETTING_OTLP_HEADERS,
    SP_SETTING_OTLP_TIMEOUT,
    SP_SETTING_OTLP_CERTIFICATE,
    SP_SETTING_OTLP_INSECURE,           /* for "host:port" endpoints */
    SP_SETTING_SERVICE_NAME,
    SP_SETTING_RESOURCE_ATTRIBUTES,
    SP_SETTING_TRACES_EXPORTER,
    SP_SETTING_LOGS_EXPORTER,
    SP_SETTING_TRACES_SAMPLER,
    SP_SETTING_TRACES_SAMPLER_ARG,
    SP_SETTING_PROPAGATORS,
    SP_SETTING_PROFILER_EXPORT_INTERVAL,
    SP_SETTING_BSP_SCHEDULE_DELAY,
    SP_SETTING_BSP_MAX_EXPORT_BATCH_SIZE,
    SP_SETTING_BSP_MAX_QUEUE_SIZE,
    SP_SETTING_PROFILER_MAX_STACK_DEPTH,
    SP_SETTING_HTTP_KNOWN_METHODS,
    SP_SETTING_COUNT
} sp_setting;

typedef enum sp_origin {
    SP_ORIGIN_DEFAULT,
    SP_ORIGIN_ENV,
    SP_ORIGIN_DIRECTIVE
} sp_origin;

typedef enum sp_exporter {
    SP_EXPORTER_OTLP,
    SP_EXPORTER_CONSOLE,
    SP_EXPORTER_NONE
} sp_exporter;

typedef enum sp_trace_sampler {
    SP_SAMPLER_ALWAYS_ON,
    SP_SAMPLER_ALWAYS_OFF,
    SP_SAMPLER_TRACEIDRATIO,
    SP_SAMPLER_PARENTBASED_ALWAYS_ON,
    SP_SAMPLER_PARENTBASED_ALWAYS_OFF,
    SP_SAMPLER_PARENTBASED_TRACEIDRATIO
} sp_trace_sampler;

/* Bits of SP_SETTING_PROPAGATORS; 0 is "none". */
#define SP_PROPAGATOR_TRACECONTEXT 0x01u
#define SP_PROPAGATOR_BAGGAGE      0x02u

/* Room for any message this module writes. */
#define SP_CONFIG_MESSAGE_SIZE 512

typedef struct sp_config sp_config;

/* Returns the value of an environment variable, or NULL when unset. */
typedef const char *(*sp_env_lookup)(void *ctx, const char *name);

/* Receives one warning, already worded for an operator. */
typedef void (*sp_config_warn)(void *ctx, const char *message);

/* A configuration holding every default for that server; NULL on ENOMEM. */
SP_API sp_config *sp_config_create(sp_server server);
SP_API void sp_config_destroy(sp_config *c);

/*
 * Sets a setting from a directive's argument. directive is the name the
 * operator wrote, used in messages. On a bad value returns SP_ERR_INVALID,
 * leaves the setting as it was and writes the error into msg. On success
 * msg may still hold a warning (a probability above the limit is clamped):
 * msg[0] != '\0' means log it.
 */
SP_API sp_status sp_config_set_directive(sp_config *c, sp_setting s,
    const char *directive, const char *value, size_t len, char *msg,
    size_t msg_size);

/*
 * The adapter met the on switch ("spanprof on", "Spanprof On") in an inner
 * scope (nginx: server, location; httpd: virtual host, directory
 * sections). The server-wide switch decides whether any of it runs, so
 * sp_config_complete warns when that switch is off and this "on" has no
 * effect. Call it before sp_config_complete.
 */
SP_API void sp_config_note_scope_on(sp_config *c);

/*
 * Reads the environment for every setting no directive set (an empty
 * variable counts as unset, as OpenTelemetry specifies), then checks the
 * settings against each other. Each problem goes to warn, once; the
 * setting keeps its default. So does a server-wide switch whose effect an
 * operator could mistake: OTEL_SDK_DISABLED=true overridden by the on
 * directive at the top level, and an inner scope's "on" that a top-level
 * off (directive or OTEL_SDK_DISABLED) makes of no effect.
 */
SP_API void sp_config_complete(sp_config *c, sp_env_lookup lookup,
    void *lookup_ctx, sp_config_warn warn, void *warn_ctx);

/*
 * The one message for a bad value of setting s. origin says whether
 * source_name is a directive or an environment variable. The value is
 * quoted with unprintable bytes escaped, and not shown at all for
 * OTLP headers, which hold secrets. Returns the length snprintf would.
 */
SP_API size_t sp_config_invalid_message(char *buf, size_t size,
    sp_setting s, sp_origin origin, const char *source_name,
    const char *value, size_t len);

/*
 * The startup line: "spanprof VERSION configuration: NAME=value, ..." with
 * the environment variable names of SPEC section 1, "(env)" or
 * "(directive)" after a value that did not come from the default, and
 * header values masked. Returns the length snprintf would.
 */
SP_API size_t sp_config_describe(const sp_config *c, char *buf,
    size_t size);

/*
 * The value of setting s as its environment variable would carry it, so
 * that a process started with that environment (the exporter) reads the
 * same effective configuration, directives included. Secrets are NOT
 * masked: never log it. Returns the length snprintf would; 0 (and "")
 * for a setting without a value, whose variable is then left unset.
 */
SP_API size_t sp_config_value_text(const sp_config *c, sp_setting s,
    char *buf, size_t size);

/* Parses "on"/"off"/"true"/"false" (any case, blanks around dropped) for
 * per-scope switches. */
SP_API sp_status sp_config_parse_flag(const char *value, size_t len,
    bool *out);

/* Accessors. Each asserts nothing: a mismatched kind reads as 0/NULL. */
SP_API sp_origin sp_config_origin(const sp_config *c, sp_setting s);
SP_API bool sp_config_flag(const sp_config *c, sp_setting s);
SP_API double sp_config_number(const sp_config *c, sp_setting s);
/* Durations in milliseconds, counts, enum values and propagator bits. */
SP_API uint64_t sp_config_integer(const sp_config *c, sp_setting s);
/*
 * Strings. The logs and traces endpoints fall back to the OTLP endpoint.
 * NULL for a setting without a value (headers, certificate, service name,
 * resource attributes when unset).
 */
SP_API const char *sp_config_text(const sp_config *c, sp_setting s);

/*
 * The OTLP certificate file's content: at most SP_CONFIG_PEM_MAX bytes of
 * text holding a PEM certificate, checked by sp_config_pem_read.
 */
#define SP_CONFIG_PEM_MAX (4u * 1024 * 1024)
SP_API bool sp_config_pem_text(const char *text, size_t len);

/*
 * The certificate file at path read into *out (malloc'd, NUL-terminated):
 * by the configuration, so that a file of something else fails the
 * configuration test (or warns when it comes from the environment), and
 * by the OTLP client for the bytes it hands to gRPC, which would take
 * anything and fail every handshake. SP_ERR_IO, errno kept, when it
 * cannot be read; SP_ERR_INVALID when it holds no PEM certificate
 * (sp_config_pem_text); SP_ERR_NOMEM.
 */
SP_API sp_status sp_config_pem_read(const char *path, char **out);

/*
 * The exporter runs as the workers' user, not as the root master that
 * checked the configuration: a certificate file only root may read passed
 * that check and failed in the exporter with a message that blamed the
 * value. Called by a master running as root with the ids the exporter
 * gets (user: its name, for the message; groups: whether it also gets
 * that user's supplementary groups, as nginx's processes do), this
 * opens the OTLP certificate as that user in a short-lived child. When it
 * cannot, warn says so, naming the user, and the setting is dropped: the
 * exporter uses the system trust store, as it would anyway, without a
 * second, misleading warning. Warns, from a directive too: whether that
 * user can read the file is not a property of the value, and httpd's
 * configuration test cannot fail after the directives are read.
 */
SP_API void sp_config_check_exporter_user(sp_config *c, uint32_t uid,
    uint32_t gid, const char *user, bool groups, sp_config_warn warn,
    void *warn_ctx);

/* The primary environment variable of s, and its alias or NULL. */
SP_API const char *sp_setting_env_name(sp_setting s);
SP_API const char *sp_setting_env_alias(sp_setting s);
/* What a valid value looks like, as the error message says it. */
SP_API const char *sp_setting_allowed(sp_setting s);

#endif
