"""Processes of a zoomd cluster on one machine, shared by the end-to-end
test (test_cluster_e2e.py) and the benchmark (loadtest/cluster_bench.py):
child processes in their own sessions with their logs, ports chosen by the
OS, readiness by a gRPC health check, and /metrics read by name."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Callable, Dict, List, Optional

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
import zoomd  # noqa: E402

NATS = shutil.which("nats-server") or "/usr/sbin/nats-server"

# The max_payload zoomd's NATS servers get (docs/cluster.md, "NATS
# max_payload"): a log entry holds a point's payload and fields (up to 1 MiB
# as sent, up to 2.25x that in the log) with its vector; nats-server's
# default (1 MB) is too small. nats-server 2.9 has no flag for it: a config
# file holds it, the rest stays on the command line (merged over the file).
NATS_MAX_PAYLOAD = "8MB"


def nats_config(path: pathlib.Path, max_payload: str = NATS_MAX_PAYLOAD) -> pathlib.Path:
    """Writes a nats-server config file setting max_payload; its path."""
    path.write_text(f"max_payload: {max_payload}\n")
    return path


def wait_until(what, fn, timeout: float = 60.0, every: float = 0.05,
               fail: Optional[Callable[[str], None]] = None):
    """fn()'s first truthy value, polled every `every` s for `timeout` s;
    then fail(message) (default: RuntimeError). `what`: a string, or a
    callable giving one (evaluated on timeout)."""
    end = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > end:
            said = what() if callable(what) else what
            message = f"timed out after {timeout:.0f} s waiting for {said}"
            if fail is not None:
                fail(message)
            raise RuntimeError(message)
        time.sleep(every)


_handed_out: set = set()


def free_port() -> int:
    """A port the OS says is free, never one this process handed out before:
    the OS may give the same free port to two calls in a row (nothing holds
    it between them), and a cluster's processes are started after all their
    ports are chosen (a zoomd given its neighbour's port failed to bind while
    the health check, answered by the neighbour, said it served)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


class Proc:
    def __init__(self, name: str, argv: List[str], log: pathlib.Path) -> None:
        self.name, self.argv, self.log = name, argv, log
        self.p: Optional[subprocess.Popen] = None

    def start(self) -> "Proc":
        out = open(self.log, "ab")
        self.p = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        out.close()
        return self

    def signal(self, sig: int) -> None:
        if self.p is None or self.p.poll() is not None:
            return
        try:
            os.killpg(self.p.pid, sig)
        except ProcessLookupError:
            return
        if sig in (signal.SIGKILL, signal.SIGTERM):
            try:
                self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


def accepts(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def health(target: str) -> bool:
    """zoom.v1.VectorSearch SERVING: set once a node has joined its cluster
    (unknown before, not a race with the port opening)."""
    try:
        with zoomd.Client(target) as c:
            return c.health("zoom.v1.VectorSearch", timeout=1) == "SERVING"
    except zoomd.ZoomError:
        return False


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_nats(procs: List[Proc], wait_until: Callable) -> None:
    """Starts the nats-servers (argv: -a HOST -p PORT ...) and waits until
    each listens. Each gets zoomd's max_payload (NATS_MAX_PAYLOAD) from a
    config file beside its log (-c, kept in its argv for a restart) unless
    its argv names a config file of its own."""
    for p in procs:
        if "-c" not in p.argv and "--config" not in p.argv:
            p.argv += ["-c", str(nats_config(p.log.with_suffix(".conf")))]
        p.start()
    for p in procs:
        wait_until(f"{p.name} to listen", lambda p=p: accepts(p.argv[2], int(p.argv[4])), 30)


def start_serving(p: Proc, target: str, wait_until: Callable, timeout: float,
                  every: float) -> None:
    """Starts zoomd `p` and waits until it serves at `target`. A zoomd
    refuses to start until NATS has a JetStream leader: it is started again
    until it serves (bounded by `timeout`)."""
    port_file = p.log.with_suffix(".port")
    if not any(a.startswith("--port_file") for a in p.argv):
        # Written by this very process once it serves: a health answer alone
        # could come from another process on the port.
        p.argv.append(f"--port_file={port_file}")
    with contextlib.suppress(FileNotFoundError):
        port_file.unlink()
    p.start()

    def up() -> bool:
        if p.p.poll() is not None:
            p.start()
            time.sleep(0.3)
            return False
        return port_file.exists() and p.p.poll() is None and health(target)
    wait_until(lambda: f"{p.name} to serve ({p.tail()[-500:]})", up, timeout, every)


# ---- shards on a node, and un-synced data --------------------------------------------


def _stub(target: str):
    import grpc
    from zoomd._proto import zoom_pb2_grpc
    return zoom_pb2_grpc.VectorSearchStub(grpc.insecure_channel(target))


def local_shards(target: str, collection: str = "docs") -> Dict[int, str]:
    """shard -> the local collection name of `collection`'s replica on the
    node at `target` (its local collections are COLLECTION_s<K>_<uid>)."""
    from zoomd._proto import zoom_pb2
    got = _stub(target).ListCollections(zoom_pb2.ListCollectionsRequest(), timeout=10)
    out = {}
    prefix = f"{collection}_s"
    for c in got.collections:
        if c.spec.name.startswith(prefix):
            out[int(c.spec.name[len(prefix):].split("_")[0])] = c.spec.name
    return out


def caught_up(target: str, tokens: Dict[int, int], collection: str = "docs") -> bool:
    """Every replica of `collection` on the node has applied its shard's log
    up to `tokens` (shard -> sequence); False while the node cannot say."""
    import grpc
    from zoomd._proto import zoom_pb2
    try:
        s = _stub(target)
        for shard, name in local_shards(target, collection).items():
            if s.Count(zoom_pb2.CountRequest(collection=name), timeout=5).applied < \
                    tokens.get(shard, 0):
                return False
        return True
    except grpc.RpcError:
        return False


class LazyMount:
    """A lazyfs mount (tests/faults/lazyfs: writes kept in memory until
    fsync; crash() drops what was not synced) of BACKING at MNT, its log
    beside them. start() raises RuntimeError when it cannot mount."""

    def __init__(self, exe: str, backing: pathlib.Path, mnt: pathlib.Path,
                 log: pathlib.Path) -> None:
        self.exe, self.backing, self.mnt, self.log = exe, backing, mnt, log
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mnt.mkdir(parents=True, exist_ok=True)
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 15) -> None:
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([self.exe, str(self.backing), str(self.mnt), "-f"],
                                         stdout=out, stderr=subprocess.STDOUT)
        end = time.monotonic() + timeout
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None:
                raise RuntimeError(f"cannot mount FUSE here: {self.log.read_text().strip()}")
            if time.monotonic() > end:
                raise RuntimeError(f"lazyfs did not mount: {self.log.read_text()}")
            time.sleep(0.01)

    def _ctl(self, what: str) -> None:
        with open(self.mnt / ".lazyfs-ctl", "w") as ctl:
            ctl.write(what)

    def crash(self) -> None:
        """What was not synced is dropped (a power failure)."""
        self._ctl("crash")

    def sync(self) -> None:
        """Everything written so far made durable (a periodic flush)."""
        self._ctl("sync")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True, timeout=30)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
