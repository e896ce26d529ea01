#!/bin/sh
# Installs every Debian and npm package that building and testing spanprof
# needs. Quick when everything is already there: it asks dpkg first and only
# runs apt-get for what is missing. libc6-dbg (7 MB, in Debian's main
# archive): the symbolizer's unit tests read libc's DWARF from it, as an
# exporter on a debugging host does.
set -eu

DEBIAN_PACKAGES="build-essential pkg-config clang libclang-rt-14-dev
nginx nginx-dev apache2 apache2-dev libapr1-dev libaprutil1-dev
libprotobuf-c-dev protobuf-c-compiler libgrpc-dev zlib1g-dev
libdw-dev libelf-dev libcmocka-dev
perl golang-go wrk valgrind curl procps openssl dpkg-dev
libyaml-libyaml-perl lintian libc6-dbg dwz"

SUDO=
if [ "$(id -u)" != 0 ]; then
    SUDO=sudo
fi

missing=
for p in $DEBIAN_PACKAGES; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in
        *" installed") ;;
        *) missing="$missing $p" ;;
    esac
done

if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The test receiver: an OTLP/gRPC server and pprof decoder written by others.
top=$(cd "$(dirname "$0")/.." && pwd)
recv="$top/t/receiver"
if [ -f "$recv/package.json" ]; then
    # The machine may bring its own Node.js; Debian's npm only if none.
    if ! command -v npm >/dev/null 2>&1; then
        $SUDO env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
    fi
    if [ ! -d "$recv/node_modules" ] \
       || [ "$recv/package-lock.json" -nt "$recv/node_modules/.package-lock.json" ]
    then
        echo "deps: npm ci in t/receiver"
        (cd "$recv" && npm ci --no-audit --no-fund --loglevel=error)
    fi
fi
