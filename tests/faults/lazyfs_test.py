"""tests/faults/lazyfs: the crash model of the lazyfs FUSE file system.

Each test mounts lazyfs (LAZYFS_BINARY) on a fresh directory, does what a
program does, simulates a power failure through MOUNT/.lazyfs-ctl and checks
what is left (tests/faults/README.md). Skipped with the reason if this
machine cannot mount FUSE (no /dev/fuse, no CAP_SYS_ADMIN). Every wait has a
deadline.
"""
import fcntl
import mmap
import os
import random
import re
import subprocess
import sys
import threading
import time

import pytest

BINARY = os.environ.get("LAZYFS_BINARY", "")
DEADLINE_S = 15


class Mount:
    def __init__(self, tmp_path):
        self.backing = tmp_path / "backing"
        self.mnt = tmp_path / "mnt"
        self.backing.mkdir()
        self.mnt.mkdir()
        self.log_path = tmp_path / "lazyfs.log"
        self.proc = None

    def start(self):
        if not BINARY:
            pytest.skip("LAZYFS_BINARY is not set (ctest sets it)")
        assert os.access(BINARY, os.X_OK), f"LAZYFS_BINARY {BINARY} is not an executable"
        if not os.path.exists("/dev/fuse"):
            pytest.skip("no /dev/fuse on this machine")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([BINARY, str(self.backing), str(self.mnt), "-f"],
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + DEADLINE_S
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None:
                out = self.log_path.read_text()
                if re.search(r"fuse|mount|permitted|permission", out, re.I):
                    pytest.skip(f"cannot mount FUSE here: {out.strip()}")
                pytest.fail(f"lazyfs exited with {self.proc.returncode}: {out}")
            if time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait(timeout=DEADLINE_S)
                pytest.fail(f"no mount after {DEADLINE_S} s: {self.log_path.read_text()}")
            time.sleep(0.01)

    def stop(self):
        """Unmounts cleanly (fusermount3 -u): lazyfs syncs and exits 0."""
        if self.proc is None or self.proc.poll() is not None:
            return
        r = subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True,
                           text=True, timeout=DEADLINE_S)
        try:
            self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], timeout=DEADLINE_S)
            self.proc.kill()
            self.proc.wait(timeout=DEADLINE_S)
            pytest.fail(f"lazyfs did not exit after fusermount3 -u: {r.stderr}")
        assert r.returncode == 0, r.stderr
        assert self.proc.returncode == 0, self.log_path.read_text()
        assert not os.path.ismount(self.mnt)

    def ctl(self, command):
        fd = os.open(self.mnt / ".lazyfs-ctl", os.O_WRONLY)
        try:
            os.write(fd, command.encode() + b"\n")
        finally:
            os.close(fd)

    def status(self):
        text = (self.mnt / ".lazyfs-ctl").read_text()
        return {k: int(v) for k, v in (line.split() for line in text.splitlines())}

    def path(self, name):
        return self.mnt / name

    def fsync_dir(self, name="."):
        fd = os.open(self.mnt / name, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@pytest.fixture
def fs(tmp_path):
    m = Mount(tmp_path)
    m.start()
    try:
        yield m
    finally:
        m.stop()


def write_file(path, data, sync=True, flags=0):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_fsynced_data_survives_a_crash(fs):
    p = fs.path("data")
    write_file(p, b"A" * 10000)
    fs.fsync_dir()
    assert (fs.backing / "data").read_bytes() == b"A" * 10000  # durable: on the disk
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, b"B" * 100, 4090)  # across a page boundary, not synced
    os.close(fd)
    assert p.read_bytes()[4090:4190] == b"B" * 100  # visible before the crash
    assert (fs.backing / "data").read_bytes() == b"A" * 10000
    fs.ctl("crash")
    assert p.read_bytes() == b"A" * 10000


def test_unsynced_writes_are_lost_and_the_length_reverts(fs):
    p = fs.path("log")
    write_file(p, b"x" * 5000)
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, b"y" * 3000, 5000)  # append
    os.pwrite(fd, b"z" * 10, 100)  # overwrite
    assert os.fstat(fd).st_size == 8000
    os.close(fd)
    st = fs.status()
    assert st["dirty_files"] == 1 and st["dirty_pages"] >= 2
    fs.ctl("crash")
    assert os.stat(p).st_size == 5000
    assert p.read_bytes() == b"x" * 5000
    # A truncation is file data too.
    fd = os.open(p, os.O_RDWR)
    os.ftruncate(fd, 10)
    os.close(fd)
    assert os.stat(p).st_size == 10
    fs.ctl("crash")
    assert p.read_bytes() == b"x" * 5000
    p.write_bytes(b"rewritten")  # O_TRUNC
    fs.ctl("crash")
    assert p.read_bytes() == b"x" * 5000


def test_a_new_file_never_synced_is_gone(fs):
    write_file(fs.path("new"), b"hello", sync=False)
    os.mkdir(fs.path("dir"))
    write_file(fs.path("dir/inner"), b"hi", sync=False)
    assert fs.status()["journal_entries"] == 3
    fs.ctl("crash")
    assert sorted(os.listdir(fs.mnt)) == []
    assert not fs.path("new").exists() and not fs.path("dir").exists()


def test_a_new_file_whose_creation_was_committed_is_empty(fs):
    # Any fsync commits every namespace change before it (ext4's journal);
    # the data of a file is kept only by its own fsync.
    write_file(fs.path("a"), b"unsynced data", sync=False)
    write_file(fs.path("b"), b"synced")
    fs.ctl("crash")
    assert fs.path("a").read_bytes() == b""
    assert fs.path("b").read_bytes() == b"synced"


def test_rename_over_an_existing_file(fs):
    # The CURRENT/MANIFEST pattern: write a temporary, fsync it, rename it
    # over the old file, fsync the directory.
    write_file(fs.path("CURRENT"), b"old\n")
    fs.fsync_dir()
    write_file(fs.path("CURRENT.tmp"), b"new\n")
    os.rename(fs.path("CURRENT.tmp"), fs.path("CURRENT"))
    assert fs.path("CURRENT").read_bytes() == b"new\n"
    fs.ctl("crash")  # the rename was not synced: undone
    assert fs.path("CURRENT").read_bytes() == b"old\n"
    assert fs.path("CURRENT.tmp").read_bytes() == b"new\n"

    os.rename(fs.path("CURRENT.tmp"), fs.path("CURRENT"))
    fs.fsync_dir()
    fs.ctl("crash")  # synced: kept
    assert fs.path("CURRENT").read_bytes() == b"new\n"
    assert sorted(os.listdir(fs.mnt)) == ["CURRENT"]
    assert sorted(os.listdir(fs.backing)) == [".lazyfs-trash", "CURRENT"]
    assert os.listdir(fs.backing / ".lazyfs-trash") == []  # committed: emptied


def test_directory_rename_and_hard_link_roll_back(fs):
    os.mkdir(fs.path("a"))
    write_file(fs.path("a/f"), b"in a")
    fs.fsync_dir()
    os.rename(fs.path("a"), fs.path("b"))
    os.link(fs.path("b/f"), fs.path("g"))
    with pytest.raises(FileExistsError):
        os.open(fs.path("g"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    assert os.stat(fs.path("g")).st_nlink == 2
    fs.ctl("crash")
    assert sorted(os.listdir(fs.mnt)) == ["a"]
    assert fs.path("a/f").read_bytes() == b"in a"


def test_unlink_mkdir_rmdir_roll_back(fs):
    os.mkdir(fs.path("d"))
    write_file(fs.path("d/f"), b"kept")
    fs.fsync_dir("d")
    os.unlink(fs.path("d/f"))
    with pytest.raises(OSError):
        os.rmdir(fs.path("d/nope"))
    fs.ctl("crash")
    assert fs.path("d/f").read_bytes() == b"kept"
    os.unlink(fs.path("d/f"))
    os.rmdir(fs.path("d"))
    fs.fsync_dir()
    fs.ctl("crash")
    assert os.listdir(fs.mnt) == []


def test_appended_wal_keeps_only_the_synced_prefix(fs):
    # RocksDB's WAL: append, fdatasync, append more, then the power fails.
    p = fs.path("000012.log")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, b"r" * 8192)
    os.fdatasync(fd)
    os.write(fd, b"s" * 5000)
    assert os.stat(p).st_size == 13192
    os.close(fd)
    fs.ctl("crash")
    assert p.read_bytes() == b"r" * 8192


def test_sync_command_and_clean_unmount_keep_everything(tmp_path):
    m = Mount(tmp_path)
    m.start()
    try:
        write_file(m.path("a"), b"1", sync=False)
        m.ctl("sync")
        m.ctl("crash")
        assert m.path("a").read_bytes() == b"1"
        write_file(m.path("b"), b"2", sync=False)
        with pytest.raises(OSError):
            m.ctl("explode")
    finally:
        m.stop()
    assert (m.backing / "a").read_bytes() == b"1"
    assert (m.backing / "b").read_bytes() == b"2"
    # No lazyfs left serving this mount point.
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        assert str(m.mnt).encode() not in cmdline or int(pid) == os.getpid(), pid


def test_o_direct_open_and_pread(fs):
    p = fs.path("vectors")
    write_file(p, bytes(range(256)) * 32)  # 8 KiB, synced
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, b"\xff" * 4096, 8192)  # a third page, not synced
    os.close(fd)
    fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, 8192)  # page-aligned
        assert os.preadv(fd, [buf], 4096) == 8192
        assert buf[:4096] == bytes(range(256)) * 16
        assert buf[4096:] == b"\xff" * 4096
    finally:
        os.close(fd)
    fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, 4096)
        buf.write(b"\x01" * 4096)
        assert os.pwritev(fd, [buf], 0) == 4096
        os.fsync(fd)  # the whole file: the third page too
    finally:
        os.close(fd)
    fs.ctl("crash")
    assert p.read_bytes() == b"\x01" * 4096 + bytes(range(256)) * 16 + b"\xff" * 4096


def test_mmap_reads_and_shared_writes(fs):
    p = fs.path("mapped")
    write_file(p, b"m" * 8192)
    with open(p, "r+b") as f:
        with mmap.mmap(f.fileno(), 0) as m:
            assert m[:] == b"m" * 8192
            m[0:4] = b"MMAP"
            m.flush()  # msync: an fsync of the file
            m[4096:4100] = b"LOST"
    fs.ctl("crash")
    assert p.read_bytes()[:8] == b"MMAPmmmm"
    assert p.read_bytes()[4096:4100] == b"mmmm"


LOCKER = """
import fcntl, sys
fd = open(sys.argv[1], "r+")
try:
    (fcntl.lockf if sys.argv[2] == "fcntl" else fcntl.flock)(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    sys.exit(3)
"""


def try_lock_elsewhere(path, kind):
    return subprocess.run([sys.executable, "-c", LOCKER, str(path), kind],
                          timeout=DEADLINE_S).returncode


@pytest.mark.parametrize("kind", ["fcntl", "flock"])
def test_locks_exclude_other_processes(fs, kind):
    p = fs.path("LOCK")
    write_file(p, b"")
    with open(p, "r+") as f:
        lock = fcntl.lockf if kind == "fcntl" else fcntl.flock
        lock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert try_lock_elsewhere(p, kind) == 3
        lock(f, fcntl.LOCK_UN)
        assert try_lock_elsewhere(p, kind) == 0


def test_random_writes_match_a_model(fs):
    """Random pwrite/ftruncate/fsync/fdatasync against an in-memory model:
    the mount shows every write, the backing file and the post-crash file
    exactly what the last sync left."""
    rng = random.Random(47)
    p = fs.path("random")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    os.fsync(fd)
    cur, synced = bytearray(), b""
    for i in range(400):
        r = rng.random()
        if r < 0.6:
            off = rng.randrange(0, len(cur) + 6000)
            data = rng.randbytes(rng.randrange(1, 9000))
            assert os.pwrite(fd, data, off) == len(data)
            cur.extend(bytes(max(0, off - len(cur))))
            cur[off:off + len(data)] = data
        elif r < 0.8:
            n = rng.randrange(0, len(cur) + 5000)
            os.ftruncate(fd, n)
            cur = cur[:n] + bytearray(max(0, n - len(cur)))
        else:
            (os.fsync if r < 0.9 else os.fdatasync)(fd)
            synced = bytes(cur)
        if i % 20 == 0:
            assert os.pread(fd, len(cur) + 100, 0) == cur, i
            assert (fs.backing / "random").read_bytes() == synced, i
    os.close(fd)
    assert p.read_bytes() == cur
    fs.ctl("crash")
    assert p.read_bytes() == synced


def test_concurrent_writers(fs):
    """Four threads, four files, interleaved writes and fsyncs: each file
    keeps exactly its last synced content."""
    synced, errors = {}, []

    def writer(n):
        try:
            rng = random.Random(n)
            p = fs.path(f"w{n}")
            fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
            cur = bytearray()
            for _ in range(150):
                data = rng.randbytes(rng.randrange(1, 12000))
                os.pwrite(fd, data, len(cur))
                cur += data
                if rng.random() < 0.2:
                    os.fsync(fd)
                    synced[n] = bytes(cur)
            os.close(fd)
            assert p.read_bytes() == cur
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=DEADLINE_S * 4)
        assert not t.is_alive()
    assert not errors, errors
    fs.ctl("crash")
    for n in range(4):
        assert fs.path(f"w{n}").read_bytes() == synced.get(n, b""), n


def test_hidden_names(fs):
    assert os.listdir(fs.mnt) == []
    assert not fs.path(".lazyfs-trash").exists()
    with pytest.raises(OSError):
        os.mkdir(fs.path(".lazyfs-trash"))
    assert fs.status()["crashes"] == 0
