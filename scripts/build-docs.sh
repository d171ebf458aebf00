#!/bin/sh
# API reference with Doxygen from the public headers; any warning fails.
#
#   scripts/build-docs.sh [OUTDIR]      (default: build/docs; HTML in OUTDIR/html)
#
# Installs the Debian package doxygen if it is missing.
set -eu
cd "$(dirname "$0")/.."
out=${1:-build/docs}
if ! command -v doxygen >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "build-docs: installing doxygen"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends doxygen
fi
mkdir -p "$out"
# The Doxyfile's settings, with the output directory overridden.
{ cat Doxyfile; echo "OUTPUT_DIRECTORY = $out"; } | doxygen -
echo "build-docs: $out/html/index.html"
