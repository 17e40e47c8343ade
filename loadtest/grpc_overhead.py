#!/usr/bin/python3
"""The service's cost per call: zoomd through gRPC beside the engine in process.

Runs zoomload's over-the-wire half and zoombench's in-process half of one
measurement over the same data and knobs, and prints them side by side with
their ratios, in the format zoombench --benchmarks=grpc printed when both
halves ran in one process (until issue 46; docs/benchmarks.md "grpc", "fgd").

--workload grpc (the default):
  1. zoomload --workload grpc --grpc_parts=setup: a zoomd of its own (a child
     process on a port the OS picks) on a fresh --work_dir; the data set
     imported over gRPC (Import) and indexed (BuildIndex).
  2. the floor: zoombench --benchmarks=collection --collection_parts=floor (a
     preview-only Collection::Search over that data dir, zoomd stopped), then
     zoomload --grpc_parts=floor (Health.Check and the same preview-only
     search through gRPC).
  3. for each --concurrency c: zoombench in process at c, then zoomload
     through gRPC at c (zoomd started again on the data dir): alternated, so
     that the machine's drift hits both rows of a pair alike.
  4. zoomload --grpc_parts=batch: SearchBatch.
  Every search row carries the recall@10 (tie-aware) measured in that run.
  CPU us/q is the CPU time per query of every process of the path: zoombench
  in process; zoomload and zoomd (both ends of the channel) through gRPC.

--workload fgd:
  zoombench --benchmarks=fgd --fgd_sections=in_process (FgdIndex::Search,
  batch 1, over the model's contexts), then zoomload --workload fgd (TopK and
  StreamTopK through gRPC, one caller, the first --contexts contexts).

The children's output goes to stderr; stdout has the combined report, and
--json FILE the JSON lines zoombench --benchmarks=grpc and fgd wrote (grpc:
path setup, floor, in-process, grpc, grpc_search_batch; fgd: section grpc).
Exit status: 0, or 1 when a child fails (its status and command on stderr).

  /usr/bin/python3 loadtest/grpc_overhead.py --dataset ../shared/data/glove-6b-100d \\
      --max_queries 2000
  /usr/bin/python3 loadtest/grpc_overhead.py --workload fgd --dataset ../shared/data/lm-ptb
"""
import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fmt(v, digits):
    """zoombench's Fmt: "%.*f"."""
    return "%.*f" % (digits, v)


class Table:
    """zoombench's Table: right-aligned cells of `width`, a header and a rule first."""

    def __init__(self, headers, width=12):
        self.headers, self.width, self.printed = headers, width, False

    def row(self, cells):
        if not self.printed:
            print("".join("%*s" % (self.width, h) for h in self.headers))
            print("-" * (self.width * len(self.headers)))
            self.printed = True
        print("".join("%*s" % (self.width, c) for c in cells), flush=True)


def json_line(fields):
    """One line as JsonLines (common/report_table.h) writes it: doubles as %.6g,
    null when not finite."""
    parts = []
    for key, value in fields:
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        elif isinstance(value, float):
            text = "%.6g" % value if math.isfinite(value) else "null"
        elif value is None:
            text = "null"
        else:
            text = json.dumps(value)
        parts.append("%s: %s" % (json.dumps(key), text))
    return "{" + ", ".join(parts) + "}\n"


class Runner:
    """Runs the children, their output to stderr; reads their JSON lines."""

    def __init__(self, args, tmp):
        self.args, self.tmp, self.n = args, tmp, 0

    def run(self, argv):
        self.n += 1
        out = os.path.join(self.tmp, "%d.jsonl" % self.n)
        argv = [str(a) for a in argv] + ["--json", out]
        print("+ " + " ".join(shlex.quote(a) for a in argv), file=sys.stderr, flush=True)
        rc = subprocess.run(argv, stdout=sys.stderr, stderr=sys.stderr).returncode
        if rc != 0:
            sys.exit("grpc_overhead.py: exit status %d of: %s" % (rc, " ".join(argv)))
        with open(out) as f:
            return [json.loads(line) for line in f if line.strip()]


def one(lines, **match):
    for line in lines:
        if all(line.get(k) == v for k, v in match.items()):
            return line
    sys.exit("grpc_overhead.py: no JSON line with %s" % match)


def run_grpc(args, runner, out):
    common = ["--dataset", args.dataset, "--k", args.k, "--max_queries", args.max_queries]
    if args.metric:
        common += ["--metric", args.metric]
    zoomload = [args.zoomload, "--workload", "grpc", "--zoomd", args.zoomd,
                "--grpc_work_dir", args.work_dir, "--ef", args.ef, "--nprobe", args.nprobe,
                "--rerank", args.rerank, "--grpc_index_kind", args.index_kind,
                "--grpc_pq_m", args.pq_m, "--grpc_server_threads", args.server_threads] + common
    zoombench = [args.zoombench, "--benchmarks=collection", "--collection_dir", args.work_dir,
                 "--collection_ef", args.ef, "--collection_nprobe", args.nprobe,
                 "--collection_rerank", args.rerank] + common
    concurrency = [int(c) for c in args.concurrency.split(",") if c]

    setup = one(runner.run(zoomload + ["--grpc_parts=setup"]), path="setup")
    print("== grpc")
    print("dataset %s: %d points imported over gRPC in %.1f s (%.0f points/s), "
          "index %s built in %.1f s, preview %.1f MiB"
          % (setup["dataset"], setup["points"], setup["import_s"], setup["import_points_per_s"],
             setup["index_kind"], setup["build_s"], setup["resident_bytes"] / 1048576.0),
          flush=True)
    out.write(json_line(list(setup.items())))

    local = one(runner.run(zoombench + ["--collection_parts=floor"]), path="floor")
    remote = one(runner.run(zoomload + ["--grpc_parts=floor"]), path="floor")
    plocal, premote = local["preview_in_process_p50_us"], remote["preview_grpc_p50_us"]
    print("floor, 1 caller: Health.Check p50 %.0f us p99 %.0f us; preview-only Search "
          "in-process p50 %.0f us, gRPC p50 %.0f us (gap %.0f us)"
          % (remote["health_p50_us"], remote["health_p99_us"], plocal, premote,
             premote - plocal), flush=True)
    out.write(json_line([("workload", "grpc"), ("dataset", remote["dataset"]),
                         ("path", "floor"), ("callers", 1),
                         ("health_p50_us", remote["health_p50_us"]),
                         ("health_p99_us", remote["health_p99_us"]),
                         ("preview_in_process_p50_us", plocal),
                         ("preview_grpc_p50_us", premote)]))

    # CPU us/q: the CPU time per query of the path's processes (in process:
    # zoombench; gRPC: zoomload and zoomd, both ends of the channel).
    table = Table(["callers", "path", "recall@10", "QPS", "p50 us", "p99 us", "reads/q",
                   "CPU us/q", "QPS ratio", "p99 ratio"])
    keys = ["recall_at_10", "qps", "p50_us", "p99_us", "reads_per_query", "cpu_us_per_query"]
    for c in concurrency:
        l = one(runner.run(zoombench + ["--collection_parts=search",
                                        "--collection_concurrency", c]), path="in-process")
        r = one(runner.run(zoomload + ["--grpc_parts=search", "--grpc_concurrency", c]),
                path="grpc")

        def cells(x):
            return [fmt(x["recall_at_10"] if x["recall_at_10"] is not None else math.nan, 4),
                    fmt(x["qps"], 0), fmt(x["p50_us"], 0), fmt(x["p99_us"], 0),
                    fmt(x["reads_per_query"], 1), fmt(x["cpu_us_per_query"], 0)]
        table.row([str(c), "in-process"] + cells(l) + ["1", "1"])
        table.row([str(c), "gRPC"] + cells(r) +
                  [fmt(r["qps"] / l["qps"], 2), fmt(r["p99_us"] / l["p99_us"], 2)])
        for path, x in (("in-process", l), ("grpc", r)):
            out.write(json_line([("workload", "grpc"), ("dataset", x["dataset"]),
                                 ("path", path), ("callers", c)] +
                                [(k, x[k]) for k in keys]))
    if args.batch_size > 0:
        lines = runner.run(zoomload + ["--grpc_parts=batch", "--grpc_batch_size",
                                       args.batch_size, "--grpc_batch_callers",
                                       args.batch_callers])
        btable = Table(["calls in flight", "batch", "recall@10", "QPS (queries/s)",
                        "batches/s"], width=16)
        for x in lines:
            if x.get("path") != "grpc_search_batch":
                continue
            btable.row([str(x["callers"]), str(x["batch"]), fmt(x["recall_at_10"], 4),
                        fmt(x["qps"], 0), fmt(x["batches_per_s"], 1)])
            out.write(json_line([(k, x[k]) for k in ("workload", "dataset", "path", "callers",
                                                      "batch", "recall_at_10", "qps")]))
    print("load average (1 min) after the run: %.2f" % os.getloadavg()[0])


def run_fgd(args, runner, out):
    local = one(runner.run([args.zoombench, "--benchmarks=fgd", "--model", args.dataset,
                            "--fgd_sections=in_process", "--fgd_ef_main", args.ef]),
                section="in_process")
    remote = one(runner.run([args.zoomload, "--workload", "fgd", "--zoomd", args.zoomd,
                             "--dataset", args.dataset, "--ef", args.ef, "--k", args.k,
                             "--fgd_calls", args.contexts]), section="grpc")
    in_us, unary_us, stream_us = local["in_process_us"], remote["topk_us"], remote["stream_us"]
    print("== fgd")
    print("\n(5) through gRPC on loopback, batch 1, k = %s, ef = %s, %d contexts"
          % (args.k, args.ef, remote["contexts"]))
    table = Table(["path", "us/context", "overhead us"])
    table.row(["in-process", fmt(in_us, 1), "0"])
    table.row(["TopK (unary)", fmt(unary_us, 1), fmt(unary_us - in_us, 1)])
    table.row(["StreamTopK", fmt(stream_us, 1), fmt(stream_us - in_us, 1)])
    if remote.get("top1_equals_exact") is not None:
        agree = round(remote["top1_equals_exact"] * remote["contexts"])
        print("top-1 through gRPC equals the exact top-1 for %d of %d contexts (in process: "
              "zoombench --benchmarks=fgd's P@1)" % (agree, remote["contexts"]))
    out.write(json_line([("workload", "fgd"), ("section", "grpc"), ("in_process_us", in_us),
                         ("topk_us", unary_us), ("stream_us", stream_us)]))
    print("load average (1 min) after the run: %.2f" % os.getloadavg()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=["grpc", "fgd"], default="grpc")
    ap.add_argument("--build_dir", default=os.path.join(REPO, "build"),
                    help="where zoombench, zoomload and zoomd are (bench/, loadtest/, "
                         "server/main/)")
    ap.add_argument("--zoombench", help="default: BUILD_DIR/bench/zoombench")
    ap.add_argument("--zoomload", help="default: BUILD_DIR/loadtest/zoomload")
    ap.add_argument("--zoomd", help="default: BUILD_DIR/server/main/zoomd")
    ap.add_argument("--dataset", help="grpc: a vector data set folder (default "
                                      "../shared/data/glove-6b-100d); fgd: the model folder "
                                      "(default ../shared/data/lm-ptb)")
    ap.add_argument("--metric", default="", help="grpc: l2, ip or cosine (default: the "
                                                 "folder's first with ground truth)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--max_queries", type=int, default=0,
                    help="grpc: the first N queries (0: all)")
    ap.add_argument("--ef", type=int, default=64)
    ap.add_argument("--nprobe", type=int, default=32, help="grpc")
    ap.add_argument("--rerank", type=int, default=50, help="grpc: K'")
    ap.add_argument("--concurrency", default="1,2,4,8,16", help="grpc: callers, in order")
    ap.add_argument("--index_kind", default="ivf_hnsw_pq", help="grpc: hnsw_pq | ivf_hnsw_pq")
    ap.add_argument("--pq_m", type=int, default=0, help="grpc: 0 = the server's default")
    ap.add_argument("--server_threads", type=int, default=16, help="grpc: zoomd's --threads")
    ap.add_argument("--batch_size", type=int, default=32,
                    help="grpc: queries per SearchBatch call (0: skip)")
    ap.add_argument("--batch_callers", default="1,2", help="grpc: SearchBatch calls in flight")
    ap.add_argument("--work_dir", default="/var/tmp/zoomload-grpc",
                    help="grpc: zoomd's data dir (wiped first)")
    ap.add_argument("--contexts", type=int, default=2000,
                    help="fgd: contexts sent through gRPC")
    ap.add_argument("--json", help="write the JSON lines here")
    args = ap.parse_args()
    args.zoombench = args.zoombench or os.path.join(args.build_dir, "bench", "zoombench")
    args.zoomload = args.zoomload or os.path.join(args.build_dir, "loadtest", "zoomload")
    args.zoomd = args.zoomd or os.path.join(args.build_dir, "server", "main", "zoomd")
    if not args.dataset:
        args.dataset = os.path.normpath(os.path.join(REPO, "..", "shared", "data",
                                    "glove-6b-100d" if args.workload == "grpc" else "lm-ptb"))
    for tool in (args.zoombench, args.zoomload, args.zoomd):
        if not os.access(tool, os.X_OK):
            sys.exit("grpc_overhead.py: %s is not an executable (--build_dir?)" % tool)
    with tempfile.TemporaryDirectory(prefix="grpc_overhead.") as tmp:
        out = open(args.json, "w") if args.json else open(os.devnull, "w")
        with out:
            runner = Runner(args, tmp)
            if args.workload == "grpc":
                run_grpc(args, runner, out)
            else:
                run_fgd(args, runner, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
