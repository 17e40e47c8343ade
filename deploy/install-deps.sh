#!/usr/bin/env bash
# Installs the Debian 12 packages that zoomd needs to build, run and test.
#
# Idempotent and fast when everything is present: it asks dpkg first and runs
# `apt-get update` + `apt-get install` only for what is missing. Run as root
# (or with sudo available) on Debian 12 "bookworm".
#
#   deploy/install-deps.sh            # build + run + test packages
#   deploy/install-deps.sh --build    # only what compiling zoomd needs (image build stage)
#   deploy/install-deps.sh --runtime  # only the shared libraries zoomd needs at run time
#   deploy/install-deps.sh --container  # podman + debootstrap for deploy/test-image.sh
set -euo pipefail

BUILD_PKGS=(
  build-essential cmake pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libfaiss-dev libopenblas-dev
  librocksdb-dev liburing-dev libabsl-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libhnswlib-dev libssl-dev libroaring-dev libnats-dev
)
# Only for the tests and benchmarks (not the image's build stage): fio beside
# the I/O benchmark; tests/deploy uses Debian's python3 with YAML and
# libseccomp bindings, and Prometheus (monitoring_test evaluates the Grafana
# dashboard's queries against a real zoomd); the openssl CLI makes the TLS
# tests' certificates; clang-14 and its runtimes build the libFuzzer targets;
# the Python client (client/python) and its tests and examples use Debian's
# grpcio, protobuf, numpy, pytest(-asyncio), tqdm and matplotlib (and pip and
# venv: test_install.py installs the package without a package index); the
# cluster tests start their own nats-server (JetStream); libfuse3-dev and
# fuse3 (fusermount3) build and mount tests/faults/lazyfs.
TEST_PKGS=(
  fio python3 python3-yaml python3-seccomp prometheus curl openssl
  clang-14 libclang-rt-14-dev libfuzzer-14-dev
  python3-grpcio python3-protobuf python3-numpy python3-pytest python3-pytest-asyncio
  python3-tqdm python3-matplotlib python3-pip python3-venv nats-server
  libfuse3-dev fuse3
)
# Shared libraries of a built zoomd (the Docker runtime stage uses these).
RUNTIME_PKGS=(
  libgrpc++1.51 libprotobuf32 libopenblas0-pthread libgomp1
  librocksdb7.8 liburing2 libabsl20220623 libprometheus-cpp-core1.0
  libgflags2.2 libssl3 libroaring0 libnats3.4
)
# deploy/test-image.sh: build and run the image with podman (no Docker engine
# needed); curl and python3 for its checks.
CONTAINER_PKGS=(
  podman buildah runc debootstrap golang-github-containers-common uidmap
  fuse-overlayfs slirp4netns curl python3
)

pkgs=("${BUILD_PKGS[@]}" "${TEST_PKGS[@]}")
case "${1:-}" in
  --build) pkgs=("${BUILD_PKGS[@]}") ;;
  --runtime) pkgs=("${RUNTIME_PKGS[@]}") ;;
  --container) pkgs=("${CONTAINER_PKGS[@]}") ;;
  "") ;;
  *) echo "install-deps: unknown option $1 (--build | --runtime | --container)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
