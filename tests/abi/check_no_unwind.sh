#!/bin/sh
# check_no_unwind.sh NM FILE...: none of FILE imports pthread_cancel or
# pthread_exit. glibc implements both by unwinding, with libgcc_s.so.1,
# which it loads at run time: ldd does not list it, so the image of
# scripts/build-image.sh (the packages of the ldd closure) has none, and a
# process that calls either aborts ("libgcc_s.so.1 must be installed for
# pthread_cancel to work", exit 134 or 139 on SIGTERM in a Pod).
set -eu
nm_tool=$1
shift
status=0
for f in "$@"; do
    bad=$("$nm_tool" -D --undefined-only "$f" | awk '{ sub(/@.*/, "", $2); print $2 }' |
        grep -E '^(pthread_cancel|pthread_exit)$' || true)
    if [ -n "$bad" ]; then
        echo "FAIL: $(basename "$f") imports $bad (needs libgcc_s.so.1 at run time)" >&2
        status=1
    else
        echo "ok: $(basename "$f") imports neither pthread_cancel nor pthread_exit"
    fi
done
exit "$status"
