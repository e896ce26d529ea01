#!/bin/sh
# Builds spanprof's Debian binary packages from an existing build (make
# build) with dpkg-deb alone, no debhelper:
#
#   libnginx-mod-http-spanprof  the nginx module and its exporter
#   libapache2-mod-spanprof     the httpd module and its exporter
#   spanprof-tools              spanprof-dump
#
# Usage: tools/mkdeb.sh BUILD_DIR OUT_DIR VERSION [NGINX_SRC]
# The layout is `make install`'s: each module starts the spanprof-exporter
# it finds next to its own .so. Depends: the server ABI the module was built
# against (nginx-dev's nginx-abi-*, apache2-dev's apache2-api-*), plus the
# shared libraries as dpkg-shlibdeps computes them.
set -eu

build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
version=$3
nginx_src=${4:-/usr/share/nginx/src}
top=$(cd "$(dirname "$0")/.." && pwd)

arch=$(dpkg --print-architecture)
maint="spanprof maintainers"

for f in ngx_http_spanprof_module.so mod_spanprof.so spanprof-exporter \
         spanprof-dump; do
    [ -f "$build/$f" ] || { echo "mkdeb: $build/$f missing: make build" >&2; exit 1; }
done

# The nginx ABI: the virtual package Debian's nginx provides, as dh_nginx
# reads it from the nginx-dev tree the module was compiled in.
nginx_abi=$(sed -n 's/^nginx:abi=//p' "$nginx_src/debian/libnginx-mod.abisubstvars" 2>/dev/null || true)
if [ -z "$nginx_abi" ]; then
    nginx_abi=$(dpkg-query -W -f='${Provides}\n' nginx 2>/dev/null \
                | tr ',' '\n' | sed -n 's/^ *\(nginx-abi-[^ ]*\).*/\1/p' | head -1)
fi
[ -n "$nginx_abi" ] || { echo "mkdeb: cannot tell the nginx ABI (nginx-dev)" >&2; exit 1; }

# The httpd module API: the module magic number of the headers it was
# compiled with (ap_mmn.h), which apache2-bin provides as apache2-api-MMN.
apache_inc=$(apxs -q INCLUDEDIR 2>/dev/null || echo /usr/include/apache2)
mmn=$(sed -n 's/^#define MODULE_MAGIC_NUMBER_MAJOR \([0-9]*\).*/\1/p' "$apache_inc/ap_mmn.h")
[ -n "$mmn" ] || { echo "mkdeb: cannot read $apache_inc/ap_mmn.h (apache2-dev)" >&2; exit 1; }
apache_api="apache2-api-$mmn"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The shared libraries $@ (paths inside a package tree) need, as a Depends
# value, from dpkg-shlibdeps run in a scratch source tree.
shlibdeps() {
    s="$work/shlibs"
    rm -rf "$s" && mkdir -p "$s/debian"
    printf 'Source: spanprof\n\nPackage: spanprof\nArchitecture: any\n' \
        >"$s/debian/control"
    (cd "$s" && dpkg-shlibdeps -O "$@" >"$s/out" 2>"$s/err") \
        || { cat "$s/err" >&2; return 1; }
    sed -n 's/^shlibs:Depends=//p' "$s/out"
}

# pkg NAME DEPENDS SHORT LONG: writes DEBIAN/control of $work/NAME and
# builds the package.
pkg() {
    name=$1 depends=$2 short=$3 long=$4
    root="$work/$name"
    mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$name"
    cat >"$root/usr/share/doc/$name/copyright" <<EOF
spanprof $version: an OpenTelemetry tracer and profiler for nginx and Apache
httpd, built from its source tree by \`make deb\`.
EOF
    size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
    {
        echo "Package: $name"
        echo "Source: spanprof"
        echo "Version: $version"
        echo "Architecture: $arch"
        echo "Maintainer: $maint"
        echo "Installed-Size: $size"
        echo "Depends: $depends"
        [ -z "${recommends:-}" ] || echo "Recommends: $recommends"
        echo "Section: ${section:-httpd}"
        echo "Priority: optional"
        echo "Description: $short"
        echo "$long" | sed 's/^$/./; s/^/ /'
    } >"$root/DEBIAN/control"
    (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' \
        | sort | xargs md5sum) >"$root/DEBIAN/md5sums"
    for s in postinst prerm postrm; do
        [ ! -f "$root/DEBIAN/$s" ] || chmod 0755 "$root/DEBIAN/$s"
    done
    dpkg-deb --root-owner-group -Zxz --build "$root" \
        "$out/${name}_${version}_${arch}.deb" >/dev/null
    echo "mkdeb: $out/${name}_${version}_${arch}.deb"
    recommends= section=
}

common_long="spanprof traces every HTTP request the server handles as an
OpenTelemetry span (W3C traceparent in and out) and takes CPU profiles of
the workers tied to those spans. A separate spanprof-exporter process,
started by the module, sends both over OTLP/gRPC to a collector
(OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4317)."

# --- nginx
n=libnginx-mod-http-spanprof
d="$work/$n/usr/lib/nginx/modules"
mkdir -p "$d" "$work/$n/DEBIAN" "$work/$n/usr/share/nginx/modules-available"
install -m 0644 "$build/ngx_http_spanprof_module.so" "$d/"
install -m 0755 "$build/spanprof-exporter" "$d/"
echo "load_module modules/ngx_http_spanprof_module.so;" \
    >"$work/$n/usr/share/nginx/modules-available/mod-http-spanprof.conf"
cp "$top/tools/deb/nginx.postinst" "$work/$n/DEBIAN/postinst"
cp "$top/tools/deb/nginx.prerm" "$work/$n/DEBIAN/prerm"
cp "$top/tools/deb/nginx.postrm" "$work/$n/DEBIAN/postrm"
libs=$(shlibdeps "$d/ngx_http_spanprof_module.so" "$d/spanprof-exporter")
recommends=nginx
pkg "$n" "$nginx_abi, $libs" "OpenTelemetry tracing and profiling module for nginx" \
"$common_long

This package holds the dynamic module for Debian's nginx and its exporter,
side by side in /usr/lib/nginx/modules. Installing it enables the module
(/etc/nginx/modules-enabled/50-mod-http-spanprof.conf) as Debian's own
libnginx-mod-* packages do; reload nginx to load it."

# --- httpd
n=libapache2-mod-spanprof
d="$work/$n/usr/lib/apache2/modules"
mkdir -p "$d" "$work/$n/DEBIAN" "$work/$n/etc/apache2/mods-available"
install -m 0644 "$build/mod_spanprof.so" "$d/"
install -m 0755 "$build/spanprof-exporter" "$d/"
echo "LoadModule spanprof_module /usr/lib/apache2/modules/mod_spanprof.so" \
    >"$work/$n/etc/apache2/mods-available/spanprof.load"
echo "/etc/apache2/mods-available/spanprof.load" >"$work/$n/DEBIAN/conffiles"
cp "$top/tools/deb/apache2.postinst" "$work/$n/DEBIAN/postinst"
cp "$top/tools/deb/apache2.prerm" "$work/$n/DEBIAN/prerm"
cp "$top/tools/deb/apache2.postrm" "$work/$n/DEBIAN/postrm"
libs=$(shlibdeps "$d/mod_spanprof.so" "$d/spanprof-exporter")
recommends=apache2
pkg "$n" "$apache_api, $libs" "OpenTelemetry tracing and profiling module for Apache httpd" \
"$common_long

This package holds the module for Debian's apache2 and its exporter, side
by side in /usr/lib/apache2/modules, and
/etc/apache2/mods-available/spanprof.load. Installing it enables the module
as Debian's own libapache2-mod-* packages do (unless the administrator had
disabled it); otherwise run a2enmod spanprof, then restart apache2."

# --- tools
n=spanprof-tools
mkdir -p "$work/$n/usr/bin"
install -m 0755 "$build/spanprof-dump" "$work/$n/usr/bin/"
libs=$(shlibdeps "$work/$n/usr/bin/spanprof-dump")
section=utils
pkg "$n" "$libs" "reads spanprof's traces and profiles without a backend" \
"spanprof-dump reads OTLP/JSON lines (what spanprof's console exporter
writes, and what the OpenTelemetry Collector's file exporter writes) and
shows the CPU profiles spanprof took: traces with their span trees, the top
functions of a trace, folded stacks for flamegraph.pl, or an SVG flame
graph."
