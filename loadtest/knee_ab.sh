#!/bin/bash
# The open-loop knee of one zoomd data dir under two sets of server flags, in
# one run: rounds alternate A and B (same data, same queries, same sweep), so
# the machine's drift hits both. Also prints, for each, what one request
# costs the server process at a closed-loop load: context switches and CPU
# microseconds per request (from /proc/PID/task/*/{status,stat}), by thread
# name: gRPC's own threads (nexting_thread, default-executor) beside
# zoomd's workers.
#
#   loadtest/knee_ab.sh --data_dir /var/tmp/zoomload-grpc --collection bench \
#     --dataset ../shared/data/glove-6b-100d --rates 1000,1500,2000,2500,3000 \
#     --a "--inline_reads=0 --mutex_deadlock_checks" --b "" [--rounds 2] [--build build]
#
# The data dir must already hold the collection with its index (zoomload
# --workload grpc leaves GloVe in /var/tmp/zoomload-grpc as "bench"; or
# zoomload --setup). Output: one knee line per round and configuration,
# the per-request costs, and the sweeps as JSON under --out (default
# /tmp/knee_ab).
set -euo pipefail
build=build rounds=2 out=/tmp/knee_ab a="" b="" rates="" data_dir="" collection="" dataset=""
concurrency=4 duration=5
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --a) a=$2; shift 2 ;;
    --b) b=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --data_dir) data_dir=$2; shift 2 ;;
    --collection) collection=$2; shift 2 ;;
    --dataset) dataset=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    *) echo "knee_ab.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$rates" ] || [ -z "$data_dir" ] || [ -z "$collection" ] || [ -z "$dataset" ]; then
  echo "knee_ab.sh: --data_dir, --collection, --dataset and --rates are required" >&2
  exit 2
fi
zoomd=$build/server/main/zoomd zoomload=$build/loadtest/zoomload
mkdir -p "$out"
zp=""
trap '[ -n "$zp" ] && kill "$zp" 2>/dev/null; true' EXIT

start() {  # start zoomd with flags $1; sets zp and port
  rm -f "$out/port"
  # shellcheck disable=SC2086
  "$zoomd" --data_dir "$data_dir" --grpc_address 127.0.0.1:0 --port_file "$out/port" \
    --metrics_address "" $1 >"$out/zoomd.log" 2>&1 &
  zp=$!
  for _ in $(seq 300); do [ -s "$out/port" ] && break; sleep 0.1; done
  [ -s "$out/port" ] || { echo "zoomd did not start:"; tail "$out/zoomd.log"; exit 1; }
  port=$(cat "$out/port")
}
stop() { kill "$zp"; wait "$zp" 2>/dev/null || true; zp=""; }

snap() {  # name switches cpu_ticks, one line per thread
  for t in /proc/"$zp"/task/*; do
    printf '%s %s %s %s\n' "$(basename "$t")" "$(tr ' ' _ <"$t/comm")" \
      "$(awk '/^voluntary_ctxt_switches/{v=$2} /^nonvoluntary_ctxt_switches/{n=$2} END{print v+n}' "$t/status")" \
      "$(awk '{print $14+$15}' "$t/stat")"
  done | sort
}

cost() {  # closed loop at --concurrency for 3 s: per-request switches and CPU
  local label=$1 before after n hz
  hz=$(getconf CLK_TCK)
  before=$(snap)
  "$zoomload" --target 127.0.0.1:"$port" --workload search --dataset "$dataset" \
    --collection "$collection" --concurrency "$concurrency" --duration 3 --warmup 0 \
    --progress=false --json "$out/cost.json" >/dev/null
  after=$(snap)
  n=$(python3 -c "import json; print(json.load(open('$out/cost.json'))['requests'])")
  join <(echo "$before") <(echo "$after") | awk -v n="$n" -v hz="$hz" -v l="$label" '
    { s[$2] += $6 - $3; c[$2] += $7 - $4; ts += $6 - $3; tc += $7 - $4 }
    END { printf "%s cost at c=%d: %.2f switches and %.0f CPU us per request;", l, '"$concurrency"', ts / n, tc * 1e6 / hz / n
          for (k in s) if (s[k] + c[k] > 0) printf " %s %.2f/%.0fus", k, s[k] / n, c[k] * 1e6 / hz / n
          printf "\n" }'
}

for r in $(seq "$rounds"); do
  for cfg in A B; do
    flags=$a; [ "$cfg" = B ] && flags=$b
    start "$flags"
    cost "round $r $cfg [${flags:-defaults}]"
    "$zoomload" --target 127.0.0.1:"$port" --workload search --dataset "$dataset" \
      --collection "$collection" --sweep_rates "$rates" --duration "$duration" --warmup 1 \
      --progress=false --json "$out/sweep-$r-$cfg.json" >"$out/sweep-$r-$cfg.txt"
    stop
    python3 - "$out/sweep-$r-$cfg.json" "round $r $cfg" <<'EOF'
import json, sys
steps = json.load(open(sys.argv[1]))
knee = [s for s in steps if s.get("knee")]
row = lambda s: "rate %g: %.0f QPS, p50 %s us, p99 %s us, recall %.4f" % (
    s["offered_rate"], s["qps"], s["p50_us"], s["p99_us"], s["recall_at_k"] or 0)
print(sys.argv[2], "knee", row(knee[0]) if knee else "none (the first step did not keep up)")
for s in steps:
    print("   ", row(s))
EOF
  done
done
