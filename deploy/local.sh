#!/bin/sh
# The reference deployment without Docker: the same nginx and httpd
# configuration files as docker-compose.yml, rendered for this machine,
# with the modules and exporter of build/ and Debian's /usr/sbin/nginx and
# /usr/sbin/apache2.
#
#   deploy/local.sh start DIR    renders into DIR, starts backend, httpd,
#                                nginx (in that order), waits for each
#   deploy/local.sh stop DIR     stops what start started, waits until gone
#
# Ports: NGINX_PORT (default 18080), HTTPD_PORT (18081), BACKEND_PORT
# (18082), all on 127.0.0.1. The profilers and the exporters are chosen by
# spanprof's environment variables, as in the compose deployment; with
# OTEL_TRACES_EXPORTER/OTEL_LOGS_EXPORTER=console and SPANPROF_CONSOLE_PATH
# unset, each server's exporter writes its OTLP/JSON lines to
# DIR/out/nginx.jsonl and DIR/out/httpd.jsonl. Logs are in DIR/log.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build=${SPANPROF_BUILD:-$top/build}
NGINX_PORT=${NGINX_PORT:-18080}
HTTPD_PORT=${HTTPD_PORT:-18081}
BACKEND_PORT=${BACKEND_PORT:-18082}

usage() {
    echo "usage: $0 start|stop DIR" >&2
    exit 2
}
[ $# -eq 2 ] || usage
cmd=$1
dir=$2

# Waits until 127.0.0.1:$1 accepts a connection (10 s at most).
wait_port() {
    i=0
    while [ $i -lt 100 ]; do
        if perl -MIO::Socket::INET -e \
            'exit !IO::Socket::INET->new(PeerAddr => "127.0.0.1",
                                         PeerPort => $ARGV[0])' "$1"
        then
            return 0
        fi
        sleep 0.1
        i=$((i + 1))
    done
    echo "local: nothing listens on 127.0.0.1:$1 after 10 s" >&2
    return 1
}

# Starts "$@" in a session of its own, its pid in $dir/run/$name.pid.
launch() {
    name=$1
    shift
    setsid "$@" >>"$dir/log/$name.out" 2>&1 </dev/null &
    echo $! >"$dir/run/$name.pid"
}

start() {
    [ -x "$build/spanprof-exporter" ] && [ -f "$build/mod_spanprof.so" ] \
        && [ -f "$build/ngx_http_spanprof_module.so" ] \
        || { echo "local: build first (make build)" >&2; exit 1; }
    mkdir -p "$dir/run" "$dir/log" "$dir/out"
    # The exporters run as the workers' user (nobody when started as root).
    chmod 1777 "$dir/out"
    user=nobody
    group=nogroup
    "$top/deploy/render.sh" "$top/deploy/nginx/nginx.conf.in" \
        "$dir/run/nginx.conf" \
        NGINX_MODULE="$build/ngx_http_spanprof_module.so" \
        NGINX_LISTEN="127.0.0.1:$NGINX_PORT" \
        HTTPD_ADDR="127.0.0.1:$HTTPD_PORT" \
        RUN_DIR="$dir/run" \
        ERROR_LOG="$dir/log/nginx-error.log" \
        ACCESS_LOG="$dir/log/nginx-access.log"
    "$top/deploy/render.sh" "$top/deploy/httpd/httpd.conf.in" \
        "$dir/run/httpd.conf" \
        HTTPD_MODULE="$build/mod_spanprof.so" \
        APACHE_MODULES=/usr/lib/apache2/modules \
        HTTPD_LISTEN="127.0.0.1:$HTTPD_PORT" \
        BACKEND_ADDR="127.0.0.1:$BACKEND_PORT" \
        RUN_DIR="$dir/run" \
        USER=$user GROUP=$group \
        ERROR_LOG="$dir/log/httpd-error.log" \
        ACCESS_LOG="$dir/log/httpd-access.log"

    launch backend perl "$top/deploy/backend/backend.pl" \
        --listen "127.0.0.1:$BACKEND_PORT"
    wait_port "$BACKEND_PORT"
    SPANPROF_CONSOLE_PATH=${SPANPROF_CONSOLE_PATH:-$dir/out/httpd.jsonl} \
    OTEL_SERVICE_NAME=${OTEL_SERVICE_NAME:-spanprof-demo-httpd} \
        launch httpd /usr/sbin/apache2 -f "$dir/run/httpd.conf" -DFOREGROUND
    wait_port "$HTTPD_PORT"
    SPANPROF_CONSOLE_PATH=${SPANPROF_CONSOLE_PATH:-$dir/out/nginx.jsonl} \
    OTEL_SERVICE_NAME=${OTEL_SERVICE_NAME:-spanprof-demo-nginx} \
        launch nginx /usr/sbin/nginx -p "$dir/run" -c "$dir/run/nginx.conf" \
        -e "$dir/log/nginx-error.log"
    wait_port "$NGINX_PORT"
    echo "local: nginx 127.0.0.1:$NGINX_PORT -> httpd 127.0.0.1:$HTTPD_PORT" \
         "-> backend 127.0.0.1:$BACKEND_PORT (logs in $dir/log)"
}

# SIGTERM to each started process (nginx and httpd stop their workers and
# exporters, which flush first), then wait; SIGKILL after 15 s.
stop() {
    rc=0
    for name in nginx httpd backend; do
        pidfile=$dir/run/$name.pid
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill -TERM "$pid" 2>/dev/null || { rm -f "$pidfile"; continue; }
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 150 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "local: $name ($pid) still running after 15 s: SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
            rc=1
        fi
        rm -f "$pidfile"
    done
    return $rc
}

case "$cmd" in
    start) start ;;
    stop) stop ;;
    *) usage ;;
esac
