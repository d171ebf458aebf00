#!/bin/sh
# oci-image.sh OUT.tar NAME ROOTFS [--env K=V]... [--label K=V]... [--workdir DIR] [--] CMD...
#
# Pack the directory ROOTFS into an OCI image archive (an image layout in a
# tar: oci-layout, index.json, blobs/sha256/...) named NAME, with one
# layer (gzip), whose entrypoint is CMD. No registry, no daemon: the
# archive is what `ctr -n k8s.io images import OUT.tar` (containerd) and
# `skopeo copy oci-archive:OUT.tar docker://REGISTRY/NAME` (any registry)
# take. The layer is reproducible: files sorted by name, owned by root,
# dated 1970 (SOURCE_DATE_EPOCH when set).
set -eu
usage() {
    echo "usage: oci-image.sh OUT.tar NAME ROOTFS [--env K=V]... [--label K=V]... [--workdir DIR] [--] CMD..." >&2
    exit 2
}
[ $# -ge 4 ] || usage
out=$1 name=$2 rootfs=$3
shift 3
[ -d "$rootfs" ] || { echo "oci-image.sh: $rootfs: not a directory" >&2; exit 2; }
case $name in
*[!a-zA-Z0-9./:_-]* | '') echo "oci-image.sh: image name '$name': letters, digits and ./:_- only" >&2; exit 2 ;;
esac

# JSON string of $1 (the characters a command line or label can hold).
json_str() {
    printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g')"
}
# A JSON array of the arguments.
json_array() {
    ja_sep= ja_out=
    for ja_a in "$@"; do
        ja_out="$ja_out$ja_sep$(json_str "$ja_a")"
        ja_sep=,
    done
    printf '[%s]' "$ja_out"
}

env_json= label_json= workdir=/
while [ $# -gt 0 ]; do
    case $1 in
    --env)
        [ $# -ge 2 ] || usage
        env_json="$env_json${env_json:+,}$(json_str "$2")"
        shift 2 ;;
    --label)
        [ $# -ge 2 ] || usage
        case $2 in *=*) ;; *) echo "oci-image.sh: --label '$2': KEY=VALUE" >&2; exit 2 ;; esac
        label_json="$label_json${label_json:+,}$(json_str "${2%%=*}"):$(json_str "${2#*=}")"
        shift 2 ;;
    --workdir)
        [ $# -ge 2 ] || usage
        workdir=$2
        shift 2 ;;
    --) shift; break ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || usage

tmp=$(mktemp -d "${TMPDIR:-/tmp}/oci-image.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/blobs/sha256"

# blob FILE: move FILE into blobs/ under its digest; prints "DIGEST SIZE".
blob() {
    bl_d=$(sha256sum "$1" | cut -d' ' -f1)
    bl_s=$(wc -c < "$1" | tr -d ' ')
    mv "$1" "$tmp/blobs/sha256/$bl_d"
    echo "$bl_d $bl_s"
}

epoch=${SOURCE_DATE_EPOCH:-0}
tar -C "$rootfs" --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -cf "$tmp/layer" .
cmd_json=$(json_array "$@")
diff_id=$(sha256sum "$tmp/layer" | cut -d' ' -f1)
gzip -n -6 "$tmp/layer"
read -r layer_digest layer_size <<EOF
$(blob "$tmp/layer.gz")
EOF
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
printf '{"architecture":"amd64","os":"linux","created":"%s","config":{"Entrypoint":%s,"Env":[%s],"WorkingDir":%s,"Labels":{%s}},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"%s","created_by":"k8slease scripts/oci-image.sh"}]}' \
    "$created" "$cmd_json" "$env_json" "$(json_str "$workdir")" "$label_json" "$diff_id" \
    "$created" > "$tmp/config"
read -r config_digest config_size <<EOF
$(blob "$tmp/config")
EOF
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' \
    "$config_digest" "$config_size" "$layer_digest" "$layer_size" > "$tmp/manifest"
read -r manifest_digest manifest_size <<EOF
$(blob "$tmp/manifest")
EOF
# io.containerd.image.name: the name ctr import gives it; ref.name: the
# tag, as the OCI layout spec has it.
case ${name##*/} in *:*) tag=${name##*:} ;; *) tag=latest ;; esac
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":%s,"org.opencontainers.image.ref.name":%s}}]}' \
    "$manifest_digest" "$manifest_size" "$(json_str "$name")" "$(json_str "$tag")" > "$tmp/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' > "$tmp/oci-layout"
tar -C "$tmp" --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    -cf "$out.tmp" oci-layout index.json blobs
mv "$out.tmp" "$out"
echo "oci-image.sh: $out: $name (layer $layer_size bytes gzipped, sha256:$manifest_digest)" >&2
