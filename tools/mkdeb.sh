#!/bin/sh
# Builds spanprof's Debian binary packages from an existing build (make
# build) with dpkg-deb alone, no debhelper:
#
#   libnginx-mod-http-spanprof  the nginx module and its exporter
#   libapache2-mod-spanprof     the httpd module and its exporter
#   spanprof-tools              spanprof-dump and its manual page
#   spanprof-dbg                the debug files of all the above, by build id
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

# Directories and files in the packages are 0755/0644 whatever the
# caller's umask (lintian: non-standard-dir-perm otherwise).
umask 022

arch=$(dpkg --print-architecture)

# Debian policy 5.6.2: the Maintainer field needs an address. DEBEMAIL is
# the one Debian's own tools (dch) take; without it, the address the source
# tree is committed under, so no address is made up here.
email=${DEBEMAIL:-$(git -C "$top" log -1 --format=%ce 2>/dev/null || true)}
[ -n "$email" ] || { echo "mkdeb: set DEBEMAIL (no git history to take an address from)" >&2; exit 1; }
maint="spanprof maintainers <$email>"

# The changelog's date and the files' times: SOURCE_DATE_EPOCH (the
# reproducible-builds convention, which dpkg-deb also honours), else the
# last commit's time, so that building the same tree twice gives the same
# packages.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH
# The copyright years: the first and the last commit's (policy 12.5 asks
# for the notice; lintian: copyright-without-copyright-notice without one).
first=$(git -C "$top" log --reverse --format=%cd --date=format:%Y 2>/dev/null | head -1 || true)
last=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)
years=${first:-$last}
[ "$years" = "$last" ] || years="$years-$last"
commit=$(git -C "$top" describe --always --dirty --abbrev=12 2>/dev/null || true)
# The packages depend on this machine's nginx and apache2 ABI: the
# changelog names this release's codename as the distribution.
dist=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
dist=${dist:-unstable}

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

# install_elf MODE FILE DIR: installs FILE into DIR stripped, as dh_strip
# does (policy 10.1; lintian: unstripped-binary-or-object), after keeping
# its debug information as DBG/usr/lib/debug/.build-id/xx/yyyy.debug for
# spanprof-dbg, where the exporter's symbolizer looks for it by build id:
# spanprof's own functions in a profile keep their names once it is
# installed.
dbg="$work/spanprof-dbg"
install_elf() {
    mode=$1 f=$2 dir=$3
    dst="$dir/$(basename "$f")"
    install -m "$mode" "$f" "$dst"
    id=$(readelf -n "$dst" | sed -n 's/^ *Build ID: *//p' | head -1)
    [ -n "$id" ] || { echo "mkdeb: $f has no build id" >&2; exit 1; }
    dd="$dbg/usr/lib/debug/.build-id/$(echo "$id" | cut -c1-2)"
    # The exporter is in both module packages: one debug file for both.
    if [ ! -f "$dd/$(echo "$id" | cut -c3-).debug" ]; then
        mkdir -p "$dd"
        objcopy --only-keep-debug --compress-debug-sections "$dst" \
            "$dd/$(echo "$id" | cut -c3-).debug"
        chmod 0644 "$dd/$(echo "$id" | cut -c3-).debug"
    fi
    case "$f" in
        *.so) strip --remove-section=.comment --remove-section=.note \
                  --strip-unneeded "$dst" ;;
        *)    strip --remove-section=.comment --remove-section=.note "$dst" ;;
    esac
}

# pkg NAME DEPENDS SHORT LONG: writes DEBIAN/control of $work/NAME and
# builds the package.
pkg() {
    name=$1 depends=$2 short=$3 long=$4
    root="$work/$name"
    doc="$root/usr/share/doc/$name"
    mkdir -p "$root/DEBIAN" "$doc"
    sed "s/@YEARS@/$years/" "$top/tools/deb/copyright" >"$doc/copyright"
    chmod 0644 "$doc/copyright"
    # Overrides, each with its reason in the file (tools/deb/*.lintian).
    for o in "$top/tools/deb/all.lintian" "$top/tools/deb/$name.lintian"; do
        [ -f "$o" ] || continue
        mkdir -p "$root/usr/share/lintian/overrides"
        sed "s/@PACKAGE@/$name/g" "$o" >>"$root/usr/share/lintian/overrides/$name"
        chmod 0644 "$root/usr/share/lintian/overrides/$name"
    done
    # Policy 12.7: a non-native package's changelog.Debian.gz, gzip -9n
    # (no name or time inside: reproducible).
    {
        echo "spanprof ($version) $dist; urgency=medium"
        echo
        echo "  * Built by make deb (tools/mkdeb.sh) from the spanprof source tree${commit:+,}"
        [ -z "$commit" ] || echo "    commit $commit."
        echo
        echo " -- $maint  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
    } | gzip -9n >"$doc/changelog.Debian.gz"
    chmod 0644 "$doc/changelog.Debian.gz"
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
    recommends='' section=''
}

common_long="spanprof traces every HTTP request the server handles as an
OpenTelemetry span (W3C traceparent in and out) and takes CPU profiles of
the workers tied to those spans. A separate spanprof-exporter process,
started by the module, sends both over OTLP/gRPC to a collector
(OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4317)."

# The sampler's unwinder, libgcc's, is loaded with dlopen (sp_sampler.c):
# dpkg-shlibdeps cannot see it.
dlopened=libgcc-s1

# --- nginx
n=libnginx-mod-http-spanprof
d="$work/$n/usr/lib/nginx/modules"
mkdir -p "$d" "$work/$n/DEBIAN" "$work/$n/usr/share/nginx/modules-available"
install_elf 0644 "$build/ngx_http_spanprof_module.so" "$d"
install_elf 0755 "$build/spanprof-exporter" "$d"
echo "load_module modules/ngx_http_spanprof_module.so;" \
    >"$work/$n/usr/share/nginx/modules-available/mod-http-spanprof.conf"
cp "$top/tools/deb/nginx.postinst" "$work/$n/DEBIAN/postinst"
cp "$top/tools/deb/nginx.prerm" "$work/$n/DEBIAN/prerm"
cp "$top/tools/deb/nginx.postrm" "$work/$n/DEBIAN/postrm"
libs=$(shlibdeps "$d/ngx_http_spanprof_module.so" "$d/spanprof-exporter")
recommends=nginx
pkg "$n" "$nginx_abi, $libs, $dlopened" "OpenTelemetry tracing and profiling module for nginx" \
"$common_long

This package holds the dynamic module for Debian's nginx and its exporter,
side by side in /usr/lib/nginx/modules. Installing it enables the module
(/etc/nginx/modules-enabled/50-mod-http-spanprof.conf) as Debian's own
libnginx-mod-* packages do; reload nginx to load it."

# --- httpd
n=libapache2-mod-spanprof
d="$work/$n/usr/lib/apache2/modules"
mkdir -p "$d" "$work/$n/DEBIAN" "$work/$n/etc/apache2/mods-available"
install_elf 0644 "$build/mod_spanprof.so" "$d"
install_elf 0755 "$build/spanprof-exporter" "$d"
echo "LoadModule spanprof_module /usr/lib/apache2/modules/mod_spanprof.so" \
    >"$work/$n/etc/apache2/mods-available/spanprof.load"
echo "/etc/apache2/mods-available/spanprof.load" >"$work/$n/DEBIAN/conffiles"
cp "$top/tools/deb/apache2.postinst" "$work/$n/DEBIAN/postinst"
cp "$top/tools/deb/apache2.prerm" "$work/$n/DEBIAN/prerm"
cp "$top/tools/deb/apache2.postrm" "$work/$n/DEBIAN/postrm"
libs=$(shlibdeps "$d/mod_spanprof.so" "$d/spanprof-exporter")
recommends=apache2
pkg "$n" "$apache_api, $libs, $dlopened" "OpenTelemetry tracing and profiling module for Apache httpd" \
"$common_long

This package holds the module for Debian's apache2 and its exporter, side
by side in /usr/lib/apache2/modules, and
/etc/apache2/mods-available/spanprof.load. Installing it enables the module
as Debian's own libapache2-mod-* packages do (unless the administrator had
disabled it); otherwise run a2enmod spanprof, then restart apache2."

# --- tools
n=spanprof-tools
mkdir -p "$work/$n/usr/bin"
install_elf 0755 "$build/spanprof-dump" "$work/$n/usr/bin"
# Policy 12.1: a manual page for each program in /usr/bin.
mkdir -p "$work/$n/usr/share/man/man1"
gzip -9n <"$top/tools/deb/spanprof-dump.1" >"$work/$n/usr/share/man/man1/spanprof-dump.1.gz"
chmod 0644 "$work/$n/usr/share/man/man1/spanprof-dump.1.gz"
libs=$(shlibdeps "$work/$n/usr/bin/spanprof-dump")
section=utils
pkg "$n" "$libs" "reads spanprof's traces and profiles without a backend" \
"spanprof-dump reads OTLP/JSON lines (what spanprof's console exporter
writes, and what the OpenTelemetry Collector's file exporter writes) and
shows the CPU profiles spanprof took: traces with their span trees, the top
functions of a trace, folded stacks for flamegraph.pl, or an SVG flame
graph."

# --- debug symbols: the files install_elf kept, for whichever of the three
# packages of this version is installed (Debian's automatic -dbgsym
# packages are one per binary package; the exporter, the same file with
# the same build id in both module packages, would make two of them
# conflict).
n=spanprof-dbg
v="(= $version)"
section=debug
pkg "$n" "libnginx-mod-http-spanprof $v | libapache2-mod-spanprof $v | spanprof-tools $v" \
"debug symbols for spanprof's modules, exporter and spanprof-dump" \
"The debug information of the stripped binaries in
libnginx-mod-http-spanprof, libapache2-mod-spanprof and spanprof-tools,
under /usr/lib/debug/.build-id/. The exporter's symbolizer reads it there:
with this package installed, spanprof's own functions in a profile (its
filters and phase handlers in a worker's stacks) are named, and gdb and
perf find them too."
