#!/bin/sh
# Fills in a configuration template of the reference deployment:
#
#   deploy/render.sh TEMPLATE OUT NAME=VALUE...
#
# Every @NAME@ in TEMPLATE is replaced by its VALUE. Fails, writing
# nothing, when a NAME given is not in the template or when a @NAME@ is
# left without a value: the compose images and the local runner render
# the same files, and neither may silently miss a setting.
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 TEMPLATE OUT NAME=VALUE..." >&2
    exit 2
fi
template=$1
out=$2
shift 2

text=$(cat "$template")
for pair in "$@"; do
    name=${pair%%=*}
    value=${pair#*=}
    case "$name" in
        ''|*[!A-Z0-9_]*)
            echo "render: bad name in '$pair'" >&2
            exit 2 ;;
    esac
    case "$text" in
        *"@$name@"*) ;;
        *)
            echo "render: $template has no @$name@" >&2
            exit 1 ;;
    esac
    # Loop rather than sed: values are paths that may hold any of sed's
    # special characters.
    rest=$text
    text=
    while :; do
        case "$rest" in
            *"@$name@"*)
                text=$text${rest%%"@$name@"*}$value
                rest=${rest#*"@$name@"} ;;
            *)
                text=$text$rest
                break ;;
        esac
    done
done

left=$(printf '%s\n' "$text" | grep -o '@[A-Z0-9_]*@' | sort -u | tr '\n' ' ' || true)
if [ -n "$left" ]; then
    echo "render: no value for $left in $template" >&2
    exit 1
fi
printf '%s\n' "$text" >"$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
