#!/usr/bin/env bash
# Installs the Debian 12 packages that zoomd needs to build, run and test.
#
# Idempotent and fast when everything is present: it asks dpkg first and runs
# `apt-get update` + `apt-get install` only for what is missing. Run as root
# (or with sudo available) on Debian 12 "bookworm".
#
#   deploy/install-deps.sh            # build + run + test packages
#   deploy/install-deps.sh --runtime  # only the shared libraries zoomd needs at run time
set -euo pipefail

BUILD_PKGS=(
  build-essential cmake pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libfaiss-dev libopenblas-dev
  librocksdb-dev liburing-dev libabsl-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libhnswlib-dev
  fio
)
# Shared libraries of a built zoomd (the Docker runtime stage uses these).
RUNTIME_PKGS=(
  libgrpc++1.51 libprotobuf32 libopenblas0-pthread libgomp1
  librocksdb7.8 liburing2 libabsl20220623 libprometheus-cpp-core1.0
  libprometheus-cpp-pull1.0 ca-certificates
)

pkgs=("${BUILD_PKGS[@]}")
if [[ "${1:-}" == "--runtime" ]]; then
  pkgs=("${RUNTIME_PKGS[@]}")
fi

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
