#!/usr/bin/python3
"""The dependency rule of ARCHITECTURE.md, checked on every #include.

Each source file belongs to a module (its folder); a module may include the
project headers of the modules the rule lets it use, and third-party headers
only where the rule puts them. Prints every forbidden edge (file:line, the
include, the rule) and exits 1 if there is any. ARCHITECTURE.md's module
table must say what ALLOWED says (a row a module, the same modules): a
change to one without the other fails too.

    tests/deps/check_includes.py [SOURCE_DIR]
"""
import os
import re
import sys

ROOT = (sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "--self-test"
        else os.path.join(os.path.dirname(__file__), "..", ".."))

# module -> the project modules it may include (besides itself).
ALLOWED = {
    "common": set(),
    "index": {"common"},
    "storage": {"common"},
    "server/engine": {"common", "index", "storage"},
    "server/metrics": {"common"},
    "server/cluster": {"common", "server/engine", "storage"},
    "server/api": {"common", "server/engine", "storage", "proto"},
    "server/cluster/router": {"common", "server/engine", "server/api", "server/cluster", "storage",
                              "proto"},
    "server/grpc": {"common", "server/engine", "server/api", "server/cluster",
                    "server/cluster/router", "server/metrics", "proto"},
    "server/main": {"common", "server/grpc", "server/engine", "server/cluster", "client", "proto"},
    "client": {"common", "proto"},
    "loadtest": {"common", "client", "proto"},
    # zoombench measures in process; the over-the-wire twins are zoomload's.
    "bench": {"common", "index", "storage", "server/engine"},
}
# Generated protobuf/gRPC headers ("zoom/v1/...", "grpc/health/...") are the proto module.
PROTO_PREFIXES = ("zoom/v1/", "grpc/health/v1/", "grpc/reflection/v1/",
                  "grpc/reflection/v1alpha/")

# Third-party headers: where each may be included (a path prefix, or an exact file).
THIRD_PARTY = [
    (re.compile(r"^faiss/"), ["index/", "bench/bench_baselines.cc"],
     "FAISS only in index/*.cc (and zoombench's FAISS baselines)"),
    (re.compile(r"^rocksdb/"), ["storage/metadata_store.cc"], "RocksDB only in storage/metadata_store.cc"),
    (re.compile(r"^liburing\.h$"), ["storage/uring_block_reader.cc"],
     "liburing only in storage/uring_block_reader.cc"),
    (re.compile(r"^nats/|^nats\.h$"), ["server/cluster/jetstream.cc",
                                         "server/cluster/jetstream_messages.cc",
                                         "server/cluster/jetstream_internal.h"],
     "the NATS C client only in server/cluster/jetstream{.cc,_messages.cc,_internal.h}"),
    (re.compile(r"^prometheus/"), ["server/metrics/"], "prometheus-cpp only in server/metrics"),
    (re.compile(r"^(grpcpp|grpc)/"), ["server/grpc/", "server/cluster/router/", "server/main/",
                                      "client/", "loadtest/", "proto/"],
     "gRPC only in the adapters and the clients (never common, index, storage, server/engine)"),
    (re.compile(r"^openssl/"), ["storage/snapshot_archive.cc", "server/grpc/auth.cc"],
     "OpenSSL only where SHA-256 and the key comparison live"),
    (re.compile(r"^cblas\.h$|^openblas"),
     ["index/", "bench/bench_fgd.cc", "bench/datagen/ground_truth.cc"],
     "OpenBLAS only in index/ (and zoombench's softmax baseline, zoomdatagen's ground truth)"),
]

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def module_of(rel):
    for m in sorted(ALLOWED, key=len, reverse=True):
        if rel.startswith(m + "/"):
            return m
    return None


def project_module(header):
    if header.startswith(PROTO_PREFIXES):
        return "proto"
    for m in sorted(ALLOWED, key=len, reverse=True):
        if header.startswith(m + "/"):
            return m
    if header.startswith("tests/"):
        return "tests"
    return None


def self_test():
    """The checker finds planted edges of each kind (and passes a clean tree)."""
    import tempfile
    planted = {
        "common/a.h": '#include "index/hnsw_graph.h"\n',
        "index/b.cc": '#include "storage/vector_store.h"\n',
        "storage/c.cc": "#include <liburing.h>\n",
        "server/engine/d.cc": "#include <grpcpp/grpcpp.h>\n",
        "server/grpc/e.cc": '#include "storage/block_reader.h"\n',
        "client/f.cc": '#include "server/engine/collection.h"\n',
        "loadtest/g.cc": '#include "index/vector_index.h"\n',
        "bench/h.cc": '#include "client/zoom_client.h"\n',
        "bench/i.cc": "#include <grpcpp/grpcpp.h>\n",
        "index/ok.cc": '#include "common/metric.h"\n#include <faiss/Index.h>\n',
    }
    global ROOT
    with tempfile.TemporaryDirectory() as d:
        for rel, text in planted.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        ROOT = d
        import io, contextlib
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main()
    found = out.getvalue()
    missing = [r for r in planted if r != "index/ok.cc" and r not in found]
    # A doc table that disagrees with ALLOWED is caught too (the planted tree
    # has no ARCHITECTURE.md: caught as missing; a row that drifted: below).
    if "ARCHITECTURE.md: missing" not in found:
        missing.append("ARCHITECTURE.md (missing)")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "ARCHITECTURE.md"), "w") as f:
            for mod, allowed in ALLOWED.items():
                cell = ", ".join(sorted(allowed)) if mod != "index" else "common, storage"
                f.write(f"| `{mod}/` | {cell} | x |\n")
        drift = doc_table_problems(d)
        if len(drift) != 1 or "`index/`" not in drift[0]:
            missing.append(f"ARCHITECTURE.md row drift (got {drift})")
    if rc != 1 or missing or "index/ok.cc" in found:
        print(found)
        print("self-test failed; not caught:", missing)
        return 1
    print("check_includes self-test: every planted edge caught")
    return 0


def doc_table_problems(root):
    """ARCHITECTURE.md's module table says what ALLOWED says: a row a module
    (its first cell `module/`), its second cell naming exactly the modules it
    may include (words in parentheses and after a colon are notes). A change
    to ALLOWED without the doc (or the doc without ALLOWED) fails here."""
    path = os.path.join(root, "ARCHITECTURE.md")
    if not os.path.exists(path):
        return [f"ARCHITECTURE.md: missing (the module table must say what ALLOWED says)"]
    rows = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\|\s*`([^`]+)/`[^|]*\|([^|]*)\|", line)
            if m:
                rows[m.group(1)] = m.group(2)
    known = set(ALLOWED) | {"proto"}
    problems = []
    for mod, allowed in sorted(ALLOWED.items()):
        if mod not in rows:
            problems.append(f"ARCHITECTURE.md: the module table has no row for `{mod}/` "
                            f"(ALLOWED: {sorted(allowed)})")
            continue
        cell = re.sub(r"\([^)]*\)", "", rows[mod]).split(":")[0]
        said = {w.strip() for w in cell.split(",")} & known
        if said != allowed:
            problems.append(f"ARCHITECTURE.md: the row of `{mod}/` says {sorted(said)}, "
                            f"tests/deps/check_includes.py ALLOWED says {sorted(allowed)}: "
                            "change both together")
    return problems


def main():
    problems = doc_table_problems(ROOT)
    checked = 0
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = os.path.relpath(dirpath, ROOT)
        if rel_dir.startswith(("build", "tests", ".git", "deploy", "var")) and rel_dir != ".":
            dirnames[:] = []
            continue
        for name in filenames:
            if not name.endswith((".cc", ".h")):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, name))
            mod = module_of(rel)
            if mod is None:
                continue
            checked += 1
            with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    kind, header = m.groups()
                    target = project_module(header) if kind == '"' else None
                    if target is not None:
                        if target == mod:
                            continue
                        if target == "tests" or target not in ALLOWED[mod]:
                            problems.append(f"{rel}:{lineno}: includes \"{header}\": {mod} may not "
                                            f"use {target} (allowed: {sorted(ALLOWED[mod]) or 'Abseil and std only'})")
                        continue
                    for pattern, places, rule in THIRD_PARTY:
                        if pattern.search(header) and not any(rel.startswith(p) for p in places):
                            problems.append(f"{rel}:{lineno}: includes <{header}>: {rule}")
                    if mod == "common" and kind == "<" and "/" in header and not header.startswith(
                            ("absl/", "sys/", "linux/", "arpa/", "netinet/", "bits/")):
                        problems.append(f"{rel}:{lineno}: includes <{header}>: common uses Abseil "
                                        "and std only")
    for p in problems:
        print(p)
    print(f"check_includes: {checked} files, {len(problems)} forbidden edges")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(self_test() if "--self-test" in sys.argv else main())
