#!/usr/bin/env bash
# Builds the sandboxd container image without any registry: a Debian bookworm root
# filesystem (debootstrap from deb.debian.org, or --mirror) with the .deb installed,
# written as one tarball that `docker load`, `podman load` and `ctr image import` accept:
# the docker-save layout (manifest.json) and an OCI image layout (oci-layout, index.json,
# blobs/sha256/...) over the same blobs. Prints the tarball's path.
#
#   bash scripts/container-image.sh [--deb FILE] [--mirror URL] [--output FILE]
#
# Needs root (debootstrap, chroot). The base root filesystem is cached in
# build/container/base.tar (delete it to start from scratch).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
deb="" mirror="http://deb.debian.org/debian" output=""
while (($#)); do
  case "$1" in
    --deb) deb=$(realpath "$2"); shift 2 ;;
    --mirror) mirror="$2"; shift 2 ;;
    --output) output=$(realpath -m "$2"); shift 2 ;;
    *) echo "usage: scripts/container-image.sh [--deb FILE] [--mirror URL] [--output FILE]" >&2; exit 2 ;;
  esac
done
command -v python3 >/dev/null || { echo "container-image.sh: needs python3" >&2; exit 1; }
[ -n "$deb" ] || deb=$(bash scripts/package.sh | tail -1)
version=$(dpkg-deb -f "$deb" Version)
arch=$(dpkg-deb -f "$deb" Architecture)
work="$repo/build/container"
[ -n "$output" ] || output="$work/sandboxd-image_${version}_${arch}.tar"
mkdir -p "$work"
rootfs="$work/rootfs"

# Whatever an interrupted run left mounted in the chroot goes first.
unmount_chroot() {
  for m in proc sys dev/pts dev; do
    mountpoint -q "$rootfs/$m" 2>/dev/null && umount -l "$rootfs/$m" || true
  done
}
unmount_chroot
trap unmount_chroot EXIT
rm -rf --one-file-system "$rootfs"

echo "==> [1/4] Debian bookworm root filesystem (debootstrap --variant=minbase, $mirror)"
if [ ! -f "$work/base.tar" ]; then
  rm -rf --one-file-system "$work/base"
  debootstrap --variant=minbase bookworm "$work/base" "$mirror"
  tar --numeric-owner -C "$work/base" -cf "$work/base.tar.partial" .
  mv "$work/base.tar.partial" "$work/base.tar"
  rm -rf --one-file-system "$work/base"
fi
mkdir -p "$rootfs"
tar --numeric-owner -C "$rootfs" -xf "$work/base.tar"

echo "==> [2/4] apt-get install ./$(basename "$deb") (and its Recommends), runsc for the gvisor tier, curl for the healthcheck"
cp "$deb" "$rootfs/tmp/sandboxd.deb"
printf '#!/bin/sh\nexit 101\n' > "$rootfs/usr/sbin/policy-rc.d"  # start no service in the chroot
chmod 755 "$rootfs/usr/sbin/policy-rc.d"
echo "deb $mirror bookworm main" > "$rootfs/etc/apt/sources.list"
mount -t proc proc "$rootfs/proc"
in_root() { chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }
in_root apt-get -q update
# runsc is only a Suggests of the package; the image carries it so that a pod can run
# the gvisor tier (isolation.tier in the chart) with no image of its own.
in_root apt-get -q -y install /tmp/sandboxd.deb runsc curl ca-certificates
in_root apt-get clean
umount "$rootfs/proc"
rm -f "$rootfs/usr/sbin/policy-rc.d" "$rootfs/tmp/sandboxd.deb"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/*.log \
       "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old
# The engine provides /dev, /proc, /sys, /run and /tmp; device nodes have no place in a layer.
find "$rootfs/dev" -mindepth 1 -delete
rm -rf "${rootfs:?}"/tmp/* "${rootfs:?}"/run/*
commit=$(chroot "$rootfs" /usr/bin/sandboxd version | sed -n 's/^commit: //p')

# Inside a container the service listens on every address (the engine publishes the
# port); everything else is the package's default configuration.
sed -i 's/^  listen: "127.0.0.1:8080"$/  listen: "0.0.0.0:8080"/' "$rootfs/etc/sandboxd/config.yaml"
sed -i 's/^  # Loopback only: .*$/  # In the container: every address (publish the port with -p)./' "$rootfs/etc/sandboxd/config.yaml"
grep -q '^  listen: "0.0.0.0:8080"$' "$rootfs/etc/sandboxd/config.yaml"
chroot "$rootfs" /usr/bin/sandboxd config check /etc/sandboxd/config.yaml

echo "==> [3/4] the layer (one uncompressed tar of the root filesystem)"
blobs="$work/image/blobs/sha256"
rm -rf "$work/image"
mkdir -p "$blobs"
# Sorted, numeric owners (file times kept: Python checks its .pyc against them).
tar --sort=name --numeric-owner --xattrs -C "$rootfs" -cf "$work/layer.tar" .
layer_digest=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
mv "$work/layer.tar" "$blobs/$layer_digest"

echo "==> [4/4] the image config, manifests and the tarball"
python3 - "$work/image" "$layer_digest" "$version" "$commit" "$arch" <<'PY'
import hashlib, json, os, sys, datetime
root, layer, version, commit, arch = sys.argv[1:]
blobs = os.path.join(root, "blobs", "sha256")
goarch = {"amd64": "amd64", "arm64": "arm64"}.get(arch, arch)
created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
labels = {
    "org.opencontainers.image.title": "sandboxd",
    "org.opencontainers.image.description": "isolated code execution for AI assistants",
    "org.opencontainers.image.version": version,
    "org.opencontainers.image.revision": commit,
    "org.opencontainers.image.created": created,
    "org.opencontainers.image.base.name": "debian:bookworm (debootstrap --variant=minbase)",
}
config = {
    "created": created,
    "architecture": goarch,
    "os": "linux",
    "config": {
        "Entrypoint": ["/usr/bin/sandboxd", "serve"],
        "Cmd": ["--config", "/etc/sandboxd/config.yaml"],
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"],
        "ExposedPorts": {"8080/tcp": {}},
        "Volumes": {"/var/lib/sandboxd": {}},
        "WorkingDir": "/",
        "StopSignal": "SIGTERM",
        "Labels": labels,
        # Docker's healthcheck (OCI configs carry it as Docker does): /ready starts a
        # sandbox and runs `true`, so "healthy" means code execution works.
        "Healthcheck": {
            "Test": ["CMD", "curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/ready"],
            "Interval": 30_000_000_000, "Timeout": 10_000_000_000,
            "StartPeriod": 30_000_000_000, "Retries": 3,
        },
    },
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer]},
    "history": [{"created": created, "created_by": "scripts/container-image.sh: debootstrap bookworm + sandboxd " + version}],
}

def put(data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return digest

config_bytes = json.dumps(config, indent=None, separators=(",", ":")).encode()
config_digest = put(config_bytes)
layer_size = os.path.getsize(os.path.join(blobs, layer))
manifest = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
               "digest": "sha256:" + config_digest, "size": len(config_bytes)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": "sha256:" + layer, "size": layer_size}],
    "annotations": labels,
}
manifest_bytes = json.dumps(manifest, separators=(",", ":")).encode()
manifest_digest = put(manifest_bytes)
ref = "sandboxd:" + version
index = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                   "digest": "sha256:" + manifest_digest, "size": len(manifest_bytes),
                   "annotations": {"org.opencontainers.image.ref.name": version,
                                   "io.containerd.image.name": "docker.io/library/" + ref}}],
}
with open(os.path.join(root, "index.json"), "w") as f:
    json.dump(index, f)
with open(os.path.join(root, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
# docker-save's own index: the same blobs.
with open(os.path.join(root, "manifest.json"), "w") as f:
    json.dump([{"Config": "blobs/sha256/" + config_digest, "RepoTags": [ref],
                "Layers": ["blobs/sha256/" + layer]}], f)
PY
mkdir -p "$(dirname "$output")"
tar --sort=name --numeric-owner --owner=0 --group=0 --mtime="@0" -C "$work/image" -cf "$output.partial" \
    oci-layout index.json manifest.json blobs
mv "$output.partial" "$output"
rm -rf "$work/image" "$rootfs"
echo "$output"
