#!/usr/bin/env bash
# Makes a Debian 12 base image for podman/buildah from the Debian mirror when
# no image registry is reachable (e.g. an offline build machine):
#
#   deploy/make-base-image.sh [TAG]     # default TAG: localhost/debian:bookworm
#
# then build with `--build-arg BASE_IMAGE=localhost/debian:bookworm`. With a
# registry, skip this: the Dockerfile's default base is debian:bookworm-slim.
# Needs root, debootstrap and podman. Takes ~2-3 minutes.
set -euo pipefail
TAG="${1:-localhost/debian:bookworm}"
MIRROR="${DEBIAN_MIRROR:-}"
if [[ -z "$MIRROR" ]]; then
  # The mirror this machine's apt uses (deb822 or one-line format).
  MIRROR=$(grep -hoE '^URIs: *[^ ]+' /etc/apt/sources.list.d/*.sources 2>/dev/null |
           awk '{print $2}' | grep -v security | head -1 || true)
  if [[ -z "$MIRROR" ]]; then
    MIRROR=$(grep -hoE '^deb +[^ ]+' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -1 || true)
  fi
  MIRROR="${MIRROR:-http://deb.debian.org/debian}"
fi
if podman image exists "$TAG"; then
  echo "make-base-image: $TAG exists"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "make-base-image: needs debootstrap" >&2; exit 1; }
ROOT=$(mktemp -d /var/tmp/zoomd-rootfs.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
echo "make-base-image: debootstrap bookworm from $MIRROR"
debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" >/dev/null
# apt inside the image uses the same mirror plus security updates.
cat > "$ROOT/etc/apt/sources.list" <<SRC
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
SRC
rm -rf "$ROOT/var/cache/apt/archives/"*.deb "$ROOT/var/lib/apt/lists/"*
tar -C "$ROOT" -c . | podman import - "$TAG" >/dev/null
echo "make-base-image: $TAG ready"
