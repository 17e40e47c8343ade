#!/usr/bin/env bash
# Builds the zoomd image with podman and checks it for real:
#   1. zoomd in the container under deploy/seccomp-zoomd.json: the gRPC
#      health check (the image's HEALTHCHECK command) reports SERVING, the
#      io backend is io_uring (metrics), a zoomload smoke run against the
#      demo collection has zero errors and recall@10 above a floor, and the
#      data survives a container restart on the same volume;
#   2. zoomd under the engine's default seccomp profile: it falls back to
#      pread and says so in its log and in zoomd_io_backend;
#   3. flags from ZOOMD_* environment variables and from arguments.
#
#   deploy/test-image.sh              # ~15 min on 2 cores the first time
#
# Needs root and podman (deploy/install-deps.sh --container installs it).
# Exit 0: passed; 1: failed; 77: skipped (no usable container engine).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if ! command -v podman >/dev/null 2>&1; then
  echo "test-image: SKIP: podman not installed (deploy/install-deps.sh --container)"
  exit 77
fi
# podman as root on a plain host: runc and explicit ulimits (the defaults
# ask for more than an unprivileged sandbox may have).
CONF_DIR=$(mktemp -d /var/tmp/zoomd-image-test.XXXXXX)
trap 'cleanup' EXIT
cat > "$CONF_DIR/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF="$CONF_DIR/containers.conf"

IMAGE=${ZOOMD_IMAGE:-localhost/zoomd:test}
BASE=${BASE_IMAGE:-localhost/debian:bookworm}
NAME=zoomd-image-test-$$
VOLUME=zoomd-image-test-$$
GRPC_PORT=${GRPC_PORT:-15051}
METRICS_PORT=${METRICS_PORT:-19464}
cleanup() {
  podman rm -f "$NAME" >/dev/null 2>&1 || true
  podman volume rm -f "$VOLUME" >/dev/null 2>&1 || true
  rm -rf "$CONF_DIR"
}
fail() { echo "test-image: FAIL: $*" >&2; podman logs "$NAME" 2>&1 | tail -20 >&2 || true; exit 1; }

if ! podman info >/dev/null 2>&1; then
  echo "test-image: SKIP: podman cannot run here"
  exit 77
fi
if [[ "$BASE" == localhost/* ]]; then
  bash deploy/make-base-image.sh "$BASE"
fi
echo "test-image: building $IMAGE"
start=$(date +%s)
podman build --build-arg BASE_IMAGE="$BASE" -f deploy/Dockerfile -t "$IMAGE" . \
  > "$CONF_DIR/build.log" 2>&1 || { tail -40 "$CONF_DIR/build.log"; fail "image build"; }
echo "test-image: built in $(( $(date +%s) - start )) s; $(podman image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}')"

# The runtime stage: non-root, the volume, the ports, the healthcheck.
user=$(podman image inspect "$IMAGE" --format '{{.Config.User}}')
[[ "$user" == zoomd ]] || fail "image user is '$user', want zoomd"
podman image inspect "$IMAGE" --format '{{json .Config.Volumes}}' | grep -q '"/data"' || fail "no /data volume"
podman image inspect "$IMAGE" --format '{{json .Config.ExposedPorts}}' | grep -q '50051/tcp' || fail "50051 not exposed"
podman image inspect "$IMAGE" --format '{{json .Config.ExposedPorts}}' | grep -q '9464/tcp' || fail "9464 not exposed"
# No compiler or -dev package in the runtime stage.
if podman run --rm --entrypoint sh "$IMAGE" -c 'command -v g++ || command -v cmake || ls /usr/include/grpcpp' >/dev/null 2>&1; then
  fail "the runtime stage has build tools or headers"
fi

wait_healthy() {  # the image's own HEALTHCHECK command, run in the container
  for _ in $(seq 1 120); do
    if podman exec "$NAME" zoomctl --target 127.0.0.1:50051 --timeout 4 health >/dev/null 2>&1; then
      return 0
    fi
    sleep 1
  done
  fail "not SERVING after 120 s"
}
metric() {  # metric NAME_WITH_LABELS -> value
  curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'
}
# The image requires API keys (ZOOMD_API_KEY_FILE=/run/secrets/zoomd/api-keys).
ADMIN_KEY=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
printf 'admin %s\n' "$ADMIN_KEY" > "$CONF_DIR/api-keys"
chmod 0644 "$CONF_DIR/api-keys"
printf '%s\n' "$ADMIN_KEY" > "$CONF_DIR/admin-key"
run_zoomd() {  # run_zoomd EXTRA_PODMAN_ARGS... -- ZOOMD_ARGS...
  local podman_args=() ; while [[ $# -gt 0 && "$1" != "--" ]]; do podman_args+=("$1"); shift; done
  shift || true
  podman run -d --name "$NAME" -p "127.0.0.1:$GRPC_PORT:50051" -p "127.0.0.1:$METRICS_PORT:9464" \
    -v "$VOLUME:/data" -v "$CONF_DIR/api-keys:/run/secrets/zoomd/api-keys:ro" \
    -e ZOOM_API_KEY="$ADMIN_KEY" "${podman_args[@]}" "$IMAGE" "$@" >/dev/null
}

# 0. Without the key file the image refuses to start (and says why).
if out=$(podman run --rm "$IMAGE" 2>&1); then fail "the image started without API keys"; fi
grep -q "API key file" <<<"$out" || fail "no word on the missing API key file: $out"

# 1. With the io_uring profile, the demo collection from the environment.
run_zoomd --security-opt "seccomp=$ROOT/deploy/seccomp-zoomd.json" \
  -e ZOOMD_DEMO_COLLECTION=sift -e ZOOMD_THREADS=4 --
wait_healthy
backend=$(metric 'zoomd_io_backend{backend="io_uring"}')
[[ "$backend" == 1 ]] || fail "io backend under seccomp-zoomd.json is not io_uring (metrics: $(curl -fsS http://127.0.0.1:$METRICS_PORT/metrics | grep zoomd_io_backend))"
# (logs read into a variable first: `podman logs | grep -q` fails under
# pipefail when grep exits early)
logs=$(podman logs "$NAME" 2>&1)
grep -q "4 workers" <<<"$logs" || fail "ZOOMD_THREADS=4 did not reach zoomd"
# The demo collection's index builds in the background after the first
# start; measure the indexed path.
for _ in $(seq 1 120); do
  state=$(podman exec "$NAME" zoomctl --json info sift | python3 -c 'import json,sys; d = json.load(sys.stdin); print(d.get("index_state", d.get("indexState", "")))')
  [[ "$state" == READY ]] && break
  sleep 1
done
[[ "$state" == READY ]] || fail "the demo index is not READY after 120 s (state $state)"
# zoomload from the image (the same binary the README documents) against
# the server, with the dataset the image carries.
podman exec "$NAME" zoomload --target 127.0.0.1:50051 --workload search \
  --dataset /usr/share/zoomd/demo/sift --collection sift --k 10 --concurrency 2 \
  --duration 3 --warmup 1 --json /tmp/smoke.json --progress=false | tail -8
podman exec "$NAME" cat /tmp/smoke.json > "$CONF_DIR/smoke.json"
python3 - "$CONF_DIR/smoke.json" <<'PY' || fail "zoomload smoke run"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0, r["errors_by_code"]
assert r["requests"] > 100, r["requests"]
assert r["recall_at_k"] >= 0.9, r["recall_at_k"]
assert r["reads_per_query"] > 0, r["reads_per_query"]
print(f"test-image: smoke: {r['qps']:.0f} QPS, p99 {r['p99_us']:.0f} us, "
      f"recall@10 {r['recall_at_k']:.3f}, {r['reads_per_query']:.1f} SSD reads/query")
PY
# From the host through the published port too.
if [[ -x build/client/zoomctl ]]; then
  build/client/zoomctl --target "127.0.0.1:$GRPC_PORT" --api_key_file "$CONF_DIR/admin-key" \
    info sift >/dev/null || fail "zoomctl from the host"
  if build/client/zoomctl --target "127.0.0.1:$GRPC_PORT" info sift >/dev/null 2>&1; then
    fail "zoomctl without a key was served"
  fi
fi
podman stop -t 20 "$NAME" >/dev/null
code=$(podman inspect "$NAME" --format '{{.State.ExitCode}}')
[[ "$code" == 0 ]] || fail "zoomd exited $code on SIGTERM"
podman rm "$NAME" >/dev/null

# 2. The engine's default seccomp profile (no io_uring), arguments as flags;
#    the same volume: the collection is recovered, not recreated.
run_zoomd -- --threads=3
wait_healthy
backend=$(metric 'zoomd_io_backend{backend="pread"}')
[[ "$backend" == 1 ]] || fail "no pread fallback under the default profile"
logs=$(podman logs "$NAME" 2>&1)
grep -q "io backend pread (io_uring unavailable" <<<"$logs" ||
  fail "the log does not say why io_uring is not used"
grep -q "3 workers" <<<"$logs" || fail "--threads=3 did not reach zoomd"
points=$(podman exec "$NAME" zoomctl --json info sift | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["points"]))')
[[ "$points" == 4500 ]] || fail "after restart the demo collection has $points points, want 4500"
podman exec "$NAME" zoomload --target 127.0.0.1:50051 --workload search \
  --dataset /usr/share/zoomd/demo/sift --collection sift --k 10 --concurrency 2 \
  --duration 2 --warmup 1 --progress=false --json /tmp/smoke2.json >/dev/null || fail "zoomload under pread"
podman exec "$NAME" cat /tmp/smoke2.json > "$CONF_DIR/smoke2.json"
python3 - "$CONF_DIR/smoke2.json" <<'PY' || fail "zoomload under pread"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0 and r["recall_at_k"] >= 0.9, r
print(f"test-image: pread: {r['qps']:.0f} QPS, recall@10 {r['recall_at_k']:.3f}, "
      f"{r['reads_per_query']:.1f} SSD reads/query")
PY
echo "test-image: $(grep -o 'io backend pread ([^)]*)' <<<"$logs" | head -1)"
podman stop -t 20 "$NAME" >/dev/null
echo "test-image: PASS"
