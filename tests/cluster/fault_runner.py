#!/usr/bin/env python3
"""The cluster's fault runner (issue 47, part 4): bounded, seeded rounds of
faults over the topology of test_cluster_e2e.py (three nats-servers
clustered with JetStream R=3, four zoomd nodes, two routers; each zoomd host
in its own network namespace when run as root), under a mixed workload, with
a history checker after every round. A run is reproducible from its seed:
the same faults, on the same processes, at the same offsets, with the same
operations (what the processes make of them depends on timing).

Workload (one client, through either router at random, each operation with
a deadline): upserts of new ids (a vector of their own, a payload),
overwrites of acknowledged points (a new payload), deletes, SetPayload of a
typed field, and after writes, session searches (exact, k=1, the write's
tokens): the point just written must be the answer; after a delete, it must
not be.

Faults, one a round, chosen by the seed:
  kill_node, kill_nats, kill_router   kill -9, restarted 1-3 s later
  pause_node                          SIGSTOP past the node TTL, SIGCONT
  partition_node                      its link down 2-5 s (netns only)
  one_way_node                        its sends dropped 2-5 s (tc netem loss
                                      100% on its side; netns only)
  delay_node                          its sends delayed 4 s: tc netem delay
                                      100 ms +- 50 ms (netns only)
A kernel without netem (this VM's) gets tbf instead: a rate of 8 bit/s whose
queue drops nearly every packet for one_way_node, 2 Mbit/s with up to 300 ms
of queueing for delay_node; the summary says which ran.
Without network namespaces the network faults become kill_node.

The checker, after the fault is healed and the replicas have converged (every
node up and caught up with the acknowledged writes' tokens, the replicas of
each shard equal): for every id ever written, the state each replica holds
(absent, or payload and field) must be one the history allows. An
acknowledged write fixes the state, and an operation that failed or timed
out adds its outcome as also possible, for ever after (it may have been
applied, even later). Counted: lost (an acknowledged state missing from a
replica), diverged (a shard's replicas differ), wrong (a state the history
does not allow: stale, or never written), session violations. Time to heal:
from the fault's end to the replicas converged. Exit status 1 when any
is non-zero.

  tests/cluster/fault_runner.py --rounds 50 --seed 7 --json out.json

Damage to a minority's data files:
  flip_node, truncate_node            a node killed, 8 bits of one of its
                                      vector or RocksDB files (tables, WAL,
                                      MANIFEST) flipped (or the file cut
                                      short), started again
  flip_nats                           the same to one nats-server's .blk file
Loss of un-synced data (lazyfs, tests/faults/lazyfs: each nats-server's
store on a mount of its own, node z0's data dir on another; only where
lazyfs is built and /dev/fuse opens, else these kinds are left out and the
summary says so):
  power_nats                          a power failure of all three
                                      nats-servers at once: kill -9, what they
                                      had not synced dropped, restarted
  power_nats_one                      the same to one nats-server (a minority)
  power_node                          z0 partitioned, then a power failure of
                                      it, restarted, the link back
The default set (--faults) is every kind.

NATS 2.9.10's own metadata layer can wedge after a power failure of all
three nats-servers ("RAFT [_meta_] Wrong index ... n.pindex is 0", repeated;
no stream or bucket answers): zoomd cannot repair that, an operator restarts
the nats-servers (docs/cluster.md). When no write gets through for
WEDGE_WAIT seconds after a fault and a nats-server's log shows that line
since the round began, the runner does what the operator would (a clean
restart of every nats-server; then, for a server whose log still repeats
it, that server's metadata-layer state removed so that it catches up from
its peers: unwedge_nats) and marks the round nats_wedged; such rounds
count apart from zoomd's faults, and their writes are checked like every
other round's.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

import grpc  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
sys.path.insert(0, str(REPO / "tests" / "cluster"))
from zoomd._proto import zoom_pb2  # noqa: E402
from cluster_procs import NATS, LazyMount, accepts, caught_up  # noqa: E402
from cluster_procs import wait_until  # noqa: E402
from test_cluster_e2e import TTL_S, Cluster  # noqa: E402
from fault_workload import ABSENT, DIM, History, State, Workload, read_replicas, say, stub  # noqa: E402

NET_FAULTS = {"partition_node", "one_way_node", "delay_node"}
# Damage to a minority's data files.
DAMAGE_FAULTS = ["flip_node", "truncate_node", "flip_nats"]
# Loss of un-synced data (lazyfs).
POWER_FAULTS = {"power_nats", "power_nats_one", "power_node"}
# The default set: every kind. (The power failures were left out while a
# replica rewound by a power_nats repair could wait for a stream NATS had
# lost, and replicas could end apart after old copies of payload edits:
# both fixed; seed 4747, 52 rounds of every kind, lost nothing.)
FAULTS = ["kill_node", "kill_nats", "kill_router", "pause_node", "partition_node",
          "one_way_node", "delay_node"] + DAMAGE_FAULTS + sorted(POWER_FAULTS)
SHARDS, REPLICAS = 2, 3


def lazyfs_binary() -> Optional[str]:
    path = os.environ.get("LAZYFS_BINARY") or str(REPO / "build" / "tests" / "lazyfs")
    if not os.access(path, os.X_OK) or not os.path.exists("/dev/fuse"):
        return None
    return path


def fuse_opens() -> bool:
    """Whether /dev/fuse can be opened here (a container may list it and
    refuse it)."""
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
        return True
    except OSError:
        return False



WEDGE_WAIT = 60  # seconds without a write through a router before a wedge is looked for
WEDGE_LINE = "_meta_] Wrong index"  # "RAFT [<node> - _meta_] Wrong index, ..."


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.rng = random.Random(args.seed)
        self.start_failed = False  # power_node's node did not start this round
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="zoom-faults-", dir="/var/tmp"))
        # Signed snapshots: every bootstrap from a peer checks the signature.
        (self.root / "snapshot.key").write_text("fault-runner-snapshot-key-01234\n")
        self.cluster = Cluster(self.root, routers=["r0", "r1"],
                               zoomd_args=[f"--snapshot_key_file={self.root / 'snapshot.key'}"])
        # Un-synced data: each nats-server's store on a lazyfs mount of its
        # own, node z0's data dir on another.
        self.lazy: Dict[str, LazyMount] = {}
        kinds = args.faults.split(",")
        self.left_out: List[str] = []
        if set(kinds) & POWER_FAULTS:
            exe = lazyfs_binary()
            if exe is None or not fuse_opens():
                if not args.skip_unavailable:
                    raise SystemExit("power faults need lazyfs (build the lazyfs target; set "
                                     "LAZYFS_BINARY) and /dev/fuse")
                self.left_out = [k for k in kinds if k in POWER_FAULTS]
                args.faults = ",".join(k for k in kinds if k not in POWER_FAULTS)
                say(f"lazyfs or /dev/fuse is missing here: {', '.join(self.left_out)} left out")
        if set(args.faults.split(",")) & POWER_FAULTS:
            self.lazy = {m: LazyMount(exe, self.root / f"lazy-{m}" / "backing",
                                      self.root / f"lazy-{m}" / "mnt",
                                      self.root / f"lazy-{m}" / "lazyfs.log")
                         for m in [f"nats{i}" for i in range(len(self.cluster.nats))] + ["z0"]}
            for i, p in enumerate(self.cluster.nats):
                p.argv[p.argv.index("-sd") + 1] = str(self.lazy[f"nats{i}"].mnt / f"nats{i}")
            z0 = self.cluster.procs["z0"].argv
            for j, a in enumerate(z0):
                if a.startswith("--data_dir="):
                    z0[j] = f"--data_dir={self.lazy['z0'].mnt / 'z0'}"
        self.history = History()
        self.rows: List[dict] = []
        self.qdisc = ""

    # ---- faults --------------------------------------------------------------------------

    def log_sizes(self) -> List[int]:
        return [p.log.stat().st_size if p.log.exists() else 0 for p in self.cluster.nats]

    def wedged_servers(self, since: List[int]) -> List[int]:
        """The nats-servers whose logs show the metadata layer's wedge (the
        line three times or more) since the offsets `since`."""
        out = []
        for i, (p, n) in enumerate(zip(self.cluster.nats, since)):
            try:
                with open(p.log, "rb") as f:
                    f.seek(n)
                    if f.read().decode(errors="replace").count(WEDGE_LINE) >= 3:
                        out.append(i)
            except OSError:
                pass
        return out

    def unwedge_nats(self) -> None:
        """What an operator does about a wedged metadata layer: every
        nats-server stopped cleanly and started again; then, while a
        server's log still repeats the wedge (a Raft WAL that NATS 2.9
        cannot truncate: nats-server issue #3870), that server alone is
        stopped, its metadata layer's state (jetstream/$SYS/_js_/_meta_)
        removed, and started again, to catch up from its peers; one server
        at a time, at most three passes."""
        say("  ! NATS's metadata layer wedged (" + WEDGE_LINE + "): every nats-server restarted, "
            "as an operator would")
        for p in self.cluster.nats:
            p.signal(signal.SIGTERM)
        for i in range(len(self.cluster.nats)):
            self.restart_nats(i)
        for _ in range(3):
            since = self.log_sizes()
            time.sleep(20)
            wedged = self.wedged_servers(since)
            if not wedged:
                return
            for i in wedged:
                p = self.cluster.nats[i]
                meta = pathlib.Path(p.argv[p.argv.index("-sd") + 1]) / "jetstream" / "$SYS" / \
                    "_js_" / "_meta_"
                say(f"  ! {p.name} still wedged: stopped, {meta} removed, started again")
                p.signal(signal.SIGTERM)
                shutil.rmtree(meta, ignore_errors=True)
                self.restart_nats(i)

    def restart_nats(self, i: int) -> None:
        p = self.cluster.nats[i]
        p.start()
        wait_until(f"{p.name} to listen", lambda: accepts(p.argv[2], int(p.argv[4])), 30)

    def shape(self, host: str, kind: Optional[str]) -> str:
        """Impairs `host`'s sends: "drop" (all of them) or "slow" (delayed),
        with tc netem where the kernel has it, else tbf (a rate so low that
        its queue drops nearly every packet, or one that queues them); None
        removes it. Which qdisc ran."""
        net = self.cluster.net
        i = net.hosts.index(host)
        dev = net._veth(i, "b")
        cmd = ["ip", "netns", "exec", net._ns(host), "tc", "qdisc"]
        if kind is None:
            subprocess.run(cmd + ["del", "dev", dev, "root"], capture_output=True)
            return ""
        netem = {"drop": ["loss", "100%"], "slow": ["delay", "100ms", "50ms"]}[kind]
        tbf = {"drop": ["rate", "8bit", "burst", "64", "latency", "1ms"],
               "slow": ["rate", "2mbit", "burst", "16kbit", "latency", "300ms"]}[kind]
        for qdisc, spec in (("netem", netem), ("tbf", tbf)):
            got = subprocess.run(cmd + ["replace", "dev", dev, "root", qdisc, *spec],
                                 capture_output=True, text=True)
            if got.returncode == 0:
                return qdisc
        raise RuntimeError(f"tc cannot shape {dev}: {got.stderr.strip()}")

    def inject(self, fault: str) -> Tuple[str, float]:
        """Injects `fault` and heals it; what it hit and when the heal ended."""
        c, rng = self.cluster, self.rng
        if fault in NET_FAULTS and not c.net.netns:
            fault = "kill_node"
        if fault == "kill_node":
            h = rng.choice(c.nodes)
            c.procs[h].signal(signal.SIGKILL)
            time.sleep(rng.uniform(1, 3))
            c.start_zoomd(h)
        elif fault == "kill_nats":
            i = rng.randrange(len(c.nats))
            h = c.nats[i].name
            c.nats[i].signal(signal.SIGKILL)
            time.sleep(rng.uniform(1, 3))
            self.restart_nats(i)
        elif fault == "kill_router":
            h = rng.choice(c.routers)
            c.procs[h].signal(signal.SIGKILL)
            time.sleep(rng.uniform(1, 3))
            c.start_zoomd(h)
        elif fault == "pause_node":
            h = rng.choice(c.nodes)
            c.procs[h].signal(signal.SIGSTOP)
            time.sleep(TTL_S + rng.uniform(0.5, 2))
            c.procs[h].signal(signal.SIGCONT)
        elif fault == "partition_node":
            h = rng.choice(c.nodes)
            c.net.partition(h, True)
            time.sleep(rng.uniform(2, 5))
            c.net.partition(h, False)
        elif fault == "one_way_node":
            h = rng.choice(c.nodes)
            self.qdisc = self.shape(h, "drop")
            time.sleep(rng.uniform(2, 5))
            self.shape(h, None)
        elif fault == "delay_node":
            h = rng.choice(c.nodes)
            self.qdisc = self.shape(h, "slow")
            time.sleep(4)
            self.shape(h, None)
        elif fault in ("flip_node", "truncate_node"):
            # A minority's data files damaged while it is down: one node's
            # vector file or a RocksDB file (bits flipped, or cut short).
            h = rng.choice(c.nodes)
            c.procs[h].signal(signal.SIGKILL)
            self.damage(self.data_dir(h), fault == "truncate_node")
            c.start_zoomd(h)
        elif fault == "power_nats":
            h = self.power_nats(range(len(c.nats)))
        elif fault == "power_nats_one":
            h = self.power_nats([rng.randrange(len(c.nats))])
        elif fault == "power_node":
            h = self.power_node()
        elif fault == "flip_nats":
            i = rng.randrange(len(c.nats))
            h = c.nats[i].name
            c.nats[i].signal(signal.SIGKILL)
            argv = c.nats[i].argv
            self.damage(pathlib.Path(argv[argv.index("-sd") + 1]), False, suffixes=(".blk",))
            self.restart_nats(i)
        else:
            raise ValueError(fault)
        return h, time.monotonic()

    def damage(self, root: pathlib.Path, truncate: bool,
               suffixes: Tuple[str, ...] = (".zvec", ".sst", ".log")) -> None:
        """Flips 8 random bits of one data file under `root` (or cuts it to a
        random length), chosen by the seed among those with `suffixes`."""
        def wanted(p: pathlib.Path) -> bool:
            return p.suffix in suffixes or (".sst" in suffixes and
                                            p.name.startswith("MANIFEST-"))
        files = sorted(p for p in root.rglob("*") if p.is_file() and wanted(p)
                       and ".damaged-" not in str(p) and p.stat().st_size > 0)
        if not files:
            say(f"  (no file to damage under {root})")
            return
        f = self.rng.choice(files)
        size = f.stat().st_size
        if truncate:
            with open(f, "r+b") as fh:
                fh.truncate(self.rng.randrange(size))
            say(f"  damaged {f.relative_to(root)}: cut from {size} bytes")
            return
        with open(f, "r+b") as fh:
            for _ in range(8):
                off = self.rng.randrange(size)
                fh.seek(off)
                b = fh.read(1)[0]
                fh.seek(off)
                fh.write(bytes([b ^ (1 << self.rng.randrange(8))]))
        say(f"  damaged {f.relative_to(root)}: 8 bits flipped in {size} bytes")

    def data_dir(self, host: str) -> pathlib.Path:
        for a in self.cluster.procs[host].argv:
            if a.startswith("--data_dir="):
                return pathlib.Path(a.split("=", 1)[1])
        return self.cluster.root / host

    def power_nats(self, which) -> str:
        """A power failure of nats-servers `which` at once: kill -9, then
        what they had not synced dropped, then started again."""
        which = list(which)
        for i in which:
            self.cluster.nats[i].signal(signal.SIGKILL)
        for i in which:
            self.lazy[f"nats{i}"].crash()
        for i in which:
            self.restart_nats(i)
        return "nats*" if len(which) == len(self.cluster.nats) else self.cluster.nats[which[0]].name

    def power_node(self) -> str:
        """Node z0 cut off, then a power failure of it (kill -9 and what it had
        not synced dropped), started again, then the link back."""
        c = self.cluster
        if c.net.netns:
            c.net.partition("z0", True)
        c.procs["z0"].signal(signal.SIGKILL)
        self.lazy["z0"].crash()
        time.sleep(self.rng.uniform(0.5, 2))
        if c.net.netns:
            c.net.partition("z0", False)
        try:
            c.start_zoomd("z0")
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: B036 (the cluster's helpers fail with pytest.fail)
            # A node that does not join in time (it starts, but the NATS
            # servers' JetStream takes no request, as after its metadata layer
            # wedged in a power failure): the round did not heal; the run goes
            # on (the node joins on its own if JetStream comes back).
            say(f"  ! z0 did not start: {str(e)[:300]}")
            self.start_failed = True
        return "z0"

    # ---- the check -----------------------------------------------------------------------

    def converge(self, tokens: Dict[int, int]) -> float:
        """Waits until every node is caught up and each shard's replicas
        agree; the seconds it took."""
        t0 = time.monotonic()
        for h in self.cluster.nodes:
            try:
                wait_until(f"{h} to catch up",
                           lambda h=h: caught_up(self.cluster.target(h), tokens), 180, 0.1)
            except RuntimeError as e:  # a round that did not heal, not the run's end
                say(f"  ! {e}")
                self.converged = False
                return time.monotonic() - t0
        ids = sorted(self.history.attempted)
        last = [""]

        def agree() -> bool:
            try:
                reps = read_replicas(self.cluster, ids)
            except grpc.RpcError as e:
                last[0] = str(e.code())
                return False
            for shard, nodes in reps.items():
                views = list(nodes.values())
                if len(views) != REPLICAS or any(v != views[0] for v in views[1:]):
                    last[0] = f"shard {shard}'s {len(views)} replicas differ"
                    return False
            return True
        ok = True
        try:
            wait_until(lambda: f"the replicas to agree ({last[0]})", agree, 120, 0.5)
        except RuntimeError:
            ok = False
        self.converged = ok
        return time.monotonic() - t0

    def check(self) -> Dict[str, int]:
        ids = sorted(self.history.attempted)
        try:
            reps = read_replicas(self.cluster, ids)
        except grpc.RpcError as e:  # a replica unreadable: the round failed, the run goes on
            say(f"  ! the replicas cannot be read: {e.code()}")
            self.converged = False
            return {"lost": 0, "diverged": 0, "wrong": 0}
        lost = diverged = wrong = 0
        examples: List[str] = []
        seen: Dict[int, List[State]] = {}
        for shard, nodes in reps.items():
            views = list(nodes.values())
            for i in set().union(*[set(v) for v in views]):
                states = {v.get(i, ABSENT) for v in views}
                if len(states) > 1:
                    diverged += 1
                    held = ", ".join(f"{n} {v.get(i, ABSENT)[:2]}" for n, v in sorted(nodes.items()))
                    examples.append(f"id {i} differs across shard {shard}'s replicas: {held}")
            for v in views:
                for i in ids:
                    seen.setdefault(i, []).append(v.get(i, ABSENT))
        for i in ids:
            allowed = self.history.allowed(i)
            present = [s for s in seen.get(i, []) if s != ABSENT]
            if not present:
                if ABSENT not in allowed:
                    lost += 1
                    examples.append(f"id {i} lost (acknowledged {self.history.fixed.get(i)})")
                continue
            for s in set(present):
                if s not in allowed:
                    wrong += 1
                    examples.append(f"id {i} holds {s}; the history allows {allowed}")
        for e in examples[:5]:
            say(f"  ! {e}")
        return {"lost": lost, "diverged": diverged, "wrong": wrong}

    # ---- the run -------------------------------------------------------------------------

    def run(self) -> int:
        c = self.cluster
        for m in self.lazy.values():
            m.start()
        for i in range(len(c.nats)):
            if self.lazy:
                (self.lazy[f"nats{i}"].mnt / f"nats{i}").mkdir(exist_ok=True)
        c.start()
        r = stub(c.target(c.routers[0]))
        r.CreateCollection(zoom_pb2.CreateCollectionRequest(spec=zoom_pb2.CollectionSpec(
            name="docs", dim=DIM, metric=zoom_pb2.L2, shards=SHARDS, replicas=REPLICAS)),
            timeout=60)
        wl = Workload(c, random.Random(self.a.seed + 1), self.history, first_id=1)
        kinds = self.a.faults.split(",")
        bad = 0
        for rnd in range(self.a.rounds):
            fault = kinds[rnd % len(kinds)] if self.a.cycle else self.rng.choice(kinds)
            acked0, failed0, viol0 = wl.acked, wl.failed, len(wl.violations)
            logs0 = self.log_sizes()
            wedged = False
            wl.errors.clear()
            wl.first_error.clear()  # this round's own
            wl.start()
            time.sleep(self.rng.uniform(0.5, 1.5))
            target, healed_at = self.inject(fault)
            if fault in POWER_FAULTS:
                # The log lost its tail and re-seeded it: sequences from before
                # mean nothing now; the writes acknowledged from here on say
                # how far every replica must get.
                with wl.lock:
                    wl.tokens.clear()
            time.sleep(self.rng.uniform(0.5, 1.5))
            wl.finish()
            # Healed means writable again through every router (a power
            # failure of the nats-servers can leave JetStream without a
            # leader for a while), then converged.
            writable = True
            for r in c.routers:
                try:
                    wait_until(f"a write through {r}", lambda r=r: wl.probe(r),
                               WEDGE_WAIT if not wedged else 180, 0.5)
                except RuntimeError:
                    if not wedged and self.wedged_servers(logs0):
                        wedged = True
                        self.unwedge_nats()
                    try:
                        wait_until(f"a write through {r}", lambda r=r: wl.probe(r), 180, 0.5)
                    except RuntimeError:
                        writable = False
            self.converge(dict(wl.tokens))
            self.converged = self.converged and writable and not self.start_failed
            self.start_failed = False
            heal_s = time.monotonic() - healed_at
            counts = self.check()
            row = {"round": rnd, "fault": fault, "target": target,
                   "acked": wl.acked - acked0, "failed": wl.failed - failed0,
                   "session_violations": len(wl.violations) - viol0,
                   "converged": self.converged, "heal_seconds": round(heal_s, 2),
                   "nats_wedged": wedged, **counts}
            row["errors"] = dict(wl.errors)
            for v in wl.violations[viol0:viol0 + 3]:
                say(f"  ! {v}")
            if wl.errors:
                say("  failed: " + ", ".join(f"{k} x{n} ('{wl.first_error.get(k, '')[:90]}')"
                                             for k, n in sorted(wl.errors.items())))
            self.rows.append(row)
            say(f"round {rnd:3d} {fault:15s} on {target:6s}: {row['acked']:4d} acked, "
                f"{row['failed']:3d} failed, lost {counts['lost']}, diverged "
                f"{counts['diverged']}, wrong {counts['wrong']}, session violations "
                f"{row['session_violations']}, healed in {heal_s:.1f} s"
                + (" (NATS wedged; restarted)" if wedged else ""))
            if counts["lost"] or counts["diverged"] or counts["wrong"] or \
                    row["session_violations"] or not self.converged:
                bad += 1
        self.summary(wl)
        return 1 if bad else 0

    def summary(self, wl: Workload) -> None:
        table: Dict[str, dict] = {}
        for row in self.rows:
            t = table.setdefault(row["fault"], {"rounds": 0, "acked": 0, "failed": 0, "lost": 0,
                                                "diverged": 0, "wrong": 0,
                                                "session_violations": 0, "heal": [],
                                                "nats_wedged": 0})
            t["rounds"] += 1
            t["nats_wedged"] += int(row.get("nats_wedged", False))
            for k in ("acked", "failed", "lost", "diverged", "wrong", "session_violations"):
                t[k] += row[k]
            t["heal"].append(row["heal_seconds"])
        left_out = f"; left out: {', '.join(self.left_out)}" if self.left_out else ""
        say(f"\nseed {self.a.seed}, {len(self.rows)} rounds, netns {self.cluster.net.netns}, "
            f"qdisc {self.qdisc or '-'}{left_out}; "
            f"{wl.reads} session reads ({wl.read_unavailable} unavailable)")
        say(f"{'fault':15s} {'rounds':>6s} {'acked':>6s} {'failed':>6s} {'lost':>5s} "
            f"{'diverged':>8s} {'wrong':>7s} {'session':>7s} {'heal p50':>8s} {'heal max':>8s} "
            f"{'nats wedged':>11s}")
        for f, t in sorted(table.items()):
            say(f"{f:15s} {t['rounds']:6d} {t['acked']:6d} {t['failed']:6d} {t['lost']:5d} "
                f"{t['diverged']:8d} {t['wrong']:7d} {t['session_violations']:7d} "
                f"{statistics.median(t['heal']):8.1f} {max(t['heal']):8.1f} "
                f"{t['nats_wedged']:11d}")
            t["heal_seconds_median"] = statistics.median(t.pop("heal"))
        if self.a.json:
            pathlib.Path(self.a.json).write_text(json.dumps(
                {"seed": self.a.seed, "netns": self.cluster.net.netns, "qdisc": self.qdisc,
                 "rounds": self.rows, "left_out": self.left_out,
                 "by_fault": table, "session_reads": wl.reads,
                 "session_reads_unavailable": wl.read_unavailable}, indent=1) + "\n")

    def close(self, keep: bool) -> None:
        self.cluster.stop()
        for m in self.lazy.values():
            m.stop()
        if keep:
            say(f"logs in {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--faults", default=",".join(FAULTS),
                    help="a comma-separated choice of "
                    f"{', '.join(FAULTS)} (default: all)")
    ap.add_argument("--cycle", action="store_true",
                    help="take the faults in turn instead of at random")
    ap.add_argument("--skip_unavailable", action="store_true",
                    help="leave out the power faults where lazyfs or /dev/fuse is missing "
                    "(else: an error)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the data and logs")
    a = ap.parse_args(argv)
    if not os.access(NATS, os.X_OK):
        say("nats-server is not installed")
        return 2
    say(f"fault runner: seed {a.seed}, {a.rounds} rounds of {a.faults}")
    runner = Runner(a)
    code = 1
    try:
        code = runner.run()
    finally:
        runner.close(a.keep or code != 0)
    return code


if __name__ == "__main__":
    sys.exit(main())
