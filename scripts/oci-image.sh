#!/usr/bin/env bash
# scripts/oci-image.sh: builds the image deploy/Dockerfile describes without a container
# engine, then runs it. This project's machine has no Docker daemon, so the Dockerfile cannot
# be built here; this is the check that the container recipe works.
#
#   sudo scripts/oci-image.sh            # build, run `alkit --version` and a real `alkit score`
#   ALKIT_BIN=target/release/alkit sudo -E scripts/oci-image.sh   # reuse a release binary
#
# The same image as the Dockerfile, step for step: the base is Debian bookworm's minbase
# (debootstrap; `debian:bookworm-slim` is the same package set, built by debuerreotype, with
# documentation and man pages removed, which this removes too); user `alkit` uid/gid 10001
# with home /home/alkit made by `useradd` as the Dockerfile's RUN does; the release binary at
# /usr/local/bin/alkit; `USER 10001:10001`, `WORKDIR /home/alkit`,
# `HF_HOME=/home/alkit/.cache/huggingface`, `ENTRYPOINT ["alkit"]`. The binary is built by the
# host's cargo with `--locked` (the Dockerfile's build stage runs the same command in
# rust:1.89-slim-bookworm; the host is bookworm too, so it links the same glibc).
#
# The image is an OCI image layout written by umoci (`target/oci/layout`, tag `alkit:0.1.0`,
# two layers: the base, then the user and the binary), which `skopeo copy
# oci:target/oci/layout:0.1.0 docker://REGISTRY/alkit:0.1.0` pushes. It is then unpacked
# afresh from the layout alone and run the way a runtime runs it: the entrypoint, user,
# working directory and environment read from the image's own configuration, in a chroot
# with /proc and /dev mounted in a private mount namespace (unshare). `alkit score` inside
# must write the same bytes as on the host.
#
# Needs root (chroot, mounts, file ownership), debootstrap and umoci
# (`apt-get install debootstrap umoci`) and the network to Debian's mirror the first time
# (the base is kept in target/oci/base.tar for later runs).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=${OCI_WORK:-$ROOT/target/oci}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
TAG=0.1.0
HOME_DIR=/home/alkit

for tool in debootstrap umoci unshare chroot; do
    command -v "$tool" >/dev/null || { echo "oci-image: $tool is missing (apt-get install debootstrap umoci)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "oci-image: needs root (chroot, mounts, file owners)" >&2; exit 1; }

# The Dockerfile's build stage.
BIN=${ALKIT_BIN:-}
if [ -z "$BIN" ]; then
    cargo build --release --locked --bin alkit
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/alkit
fi
[ -x "$BIN" ] || { echo "oci-image: no binary at $BIN" >&2; exit 1; }

mkdir -p "$WORK"
# `FROM debian:bookworm-slim`: minbase, kept as a tarball so a rerun needs no network.
if [ ! -f "$WORK/base.tar" ]; then
    rm -rf "$WORK/base"
    echo "== debootstrap --variant=minbase bookworm (log: $WORK/debootstrap.log)"
    debootstrap --variant=minbase bookworm "$WORK/base" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
        || { tail -5 "$WORK/debootstrap.log" >&2; exit 1; }
    # What the slim image leaves out.
    rm -rf "$WORK/base"/usr/share/doc/* "$WORK/base"/usr/share/man/* \
        "$WORK/base"/usr/share/info/* "$WORK/base"/var/lib/apt/lists/* \
        "$WORK/base"/var/cache/apt/*.bin "$WORK/base"/var/cache/apt/archives/*.deb
    tar -C "$WORK/base" --numeric-owner -cf "$WORK/base.tar.tmp" .
    mv "$WORK/base.tar.tmp" "$WORK/base.tar"
    rm -rf "$WORK/base"
fi

LAYOUT=$WORK/layout
BUNDLE=$WORK/bundle
rm -rf "$LAYOUT" "$BUNDLE" "$WORK/run"
umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:$TAG"

# Layer 1: the base.
umoci unpack --image "$LAYOUT:$TAG" "$BUNDLE"
tar -C "$BUNDLE/rootfs" --numeric-owner -xf "$WORK/base.tar"
umoci repack --image "$LAYOUT:$TAG" "$BUNDLE"
rm -rf "$BUNDLE"

# Layer 2: `RUN useradd ...` and `COPY .../alkit /usr/local/bin/alkit`.
umoci unpack --image "$LAYOUT:$TAG" "$BUNDLE"
chroot "$BUNDLE/rootfs" useradd --uid 10001 --user-group --create-home --home-dir /home/alkit alkit
install -m 0755 -o 0 -g 0 "$BIN" "$BUNDLE/rootfs/usr/local/bin/alkit"
umoci repack --image "$LAYOUT:$TAG" "$BUNDLE"
rm -rf "$BUNDLE"

# USER, WORKDIR, ENV, ENTRYPOINT (literal, as the Dockerfile says them: tests/alkit/shards.rs
# checks the two agree), and the PATH debian:bookworm-slim's config sets.
umoci config --image "$LAYOUT:$TAG" \
    --config.user 10001:10001 \
    --config.workingdir /home/alkit \
    --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --config.env HF_HOME=/home/alkit/.cache/huggingface \
    --config.entrypoint alkit
umoci gc --layout "$LAYOUT"

# Run it from the layout alone: a fresh unpack, and the runtime configuration umoci derives
# from the image's config (what docker/containerd read for the same image).
RUN=$WORK/run
umoci unpack --image "$LAYOUT:$TAG" "$RUN"
R=$RUN/rootfs
read -r USER_SPEC CWD < <(python3 - "$RUN/config.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["process"]
print(f'{p["user"]["uid"]}:{p["user"]["gid"]}', p["cwd"])
PY
)
mapfile -t ENTRY < <(python3 - "$RUN/config.json" <<'PY'
import json, sys
print("\n".join(json.load(open(sys.argv[1]))["process"]["args"]))
PY
)
mapfile -t ENVS < <(python3 - "$RUN/config.json" <<'PY'
import json, sys
print("\n".join(json.load(open(sys.argv[1]))["process"]["env"]))
PY
)
[ "$USER_SPEC" = 10001:10001 ] && [ "$CWD" = "$HOME_DIR" ] && [ "${ENTRY[0]}" = alkit ] \
    || { echo "oci-image: the image's config is not the Dockerfile's: user $USER_SPEC, cwd $CWD, args ${ENTRY[*]}" >&2; exit 1; }

# `docker run IMAGE ARGS...`: the entrypoint with ARGS, as the image's user in its working
# directory with its environment only.
in_image() {
    unshare --mount --fork -- sh -c '
        R=$1; shift
        mount -t proc proc "$R/proc"
        mount --rbind /dev "$R/dev"
        exec "$@"' sh "$R" \
        chroot --userspec="$USER_SPEC" "$R" \
        env -i "${ENVS[@]}" sh -c 'cd "$0" && exec "$@"' "$CWD" "${ENTRY[0]}" "$@"
}

echo "== in the image: alkit --version"
in_image --version
[ "$(in_image --version)" = "$("$BIN" --version)" ]

# A real score: a checkpoint trained on the host, the shipped MNIST subset, scored inside
# the image into its user's home and compared byte for byte with the host's run.
CHECK=$WORK/check
rm -rf "$CHECK"
mkdir -p "$CHECK"
"$BIN" -q train --data "$ROOT/data" --model cnn --steps 30 --out "$CHECK/ck"
"$BIN" -q score --checkpoint "$CHECK/ck" --data "$ROOT/data" --scorer entropy,regrad \
    --out "$CHECK/host.csv"
mkdir -p "$R$HOME_DIR/work"
cp -r "$CHECK/ck" "$R$HOME_DIR/work/ck"
mkdir -p "$R$HOME_DIR/work/data"
cp "$ROOT"/data/*-ubyte.gz "$R$HOME_DIR/work/data/"
chown -R 10001:10001 "$R$HOME_DIR/work"
echo "== in the image: alkit score --checkpoint work/ck --data work/data --scorer entropy,regrad"
in_image -q score --checkpoint work/ck --data work/data --scorer entropy,regrad --out work/scores.csv
cmp "$CHECK/host.csv" "$R$HOME_DIR/work/scores.csv"
echo "oci-image: $(wc -l <"$CHECK/host.csv") lines of scores identical inside the image and on the host"
echo "oci-image: the image is $LAYOUT (tag $TAG); push it with skopeo copy oci:$LAYOUT:$TAG docker://REGISTRY/alkit:$TAG"
