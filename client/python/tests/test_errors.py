"""Server errors become the exception of their gRPC code with the server's
message; API keys; retries only for UNAVAILABLE on reads."""

import os
import pathlib
import socket
import subprocess
import time

import grpc
import numpy as np
import pytest

import zoomd


def test_server_errors_map_to_exceptions(client, name):
    with pytest.raises(zoomd.NotFound, match="does not exist") as e:
        client.search("no_such_collection", np.zeros(4))
    assert e.value.code == grpc.StatusCode.NOT_FOUND and not e.value.client_side
    assert isinstance(e.value, zoomd.ZoomError) and isinstance(e.value, LookupError)
    client.create_collection(name, dim=4, metric="l2")
    with pytest.raises(zoomd.AlreadyExists):
        client.create_collection(name, dim=4, metric="l2")
    client.upsert(name, [1, 2, 3], np.eye(3, 4))
    with pytest.raises(zoomd.FailedPrecondition):
        client.build_index(name)  # three points are too few to train on
    with pytest.raises(zoomd.InvalidArgument, match="above this server's limit"):
        client.search(name, np.zeros(4), k=100000)
    with pytest.raises(zoomd.ResourceExhausted, match="1024"):
        client.count(name, {"must": [{"key": "tag",
                                      "match": {"any": [str(i) for i in range(2000)]}}]})
    client.create_field_index(name, "tag", "keyword")
    with pytest.raises(zoomd.InvalidArgument, match="keyword index; a range"):
        client.count(name, {"must": [{"key": "tag", "range": {"lt": 3}}]})
    deep = {"must": [{"key": "x", "match": {"value": 1}}]}
    for _ in range(9):
        deep = {"must": [{"filter": deep}]}
    with pytest.raises(zoomd.InvalidArgument, match="deep"):
        client.count(name, deep)
    with pytest.raises(zoomd.InvalidArgument):
        client.create_collection("bad name!", dim=4)
    # A deadline already past: DEADLINE_EXCEEDED, never a hang.
    with pytest.raises(zoomd.DeadlineExceeded):
        client.search(name, np.zeros(4), timeout=0)


def _refusing_port():
    """A port bound but not listening: connections are refused for as long as
    the socket lives, and no other process can take the port meanwhile."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


class Attempts(grpc.UnaryUnaryClientInterceptor):
    def __init__(self):
        self.n = 0

    def intercept_unary_unary(self, continuation, details, request):
        self.n += 1
        return continuation(details, request)


def test_retries_only_reads_on_unavailable():
    counter = Attempts()
    sock, port = _refusing_port()
    channel = grpc.intercept_channel(grpc.insecure_channel(f"127.0.0.1:{port}"), counter)
    policy = zoomd.RetryPolicy(attempts=3, initial_backoff=0.01, max_backoff=0.02)
    c = zoomd.Client(channel=channel, retry=policy, timeout=30)
    with pytest.raises(zoomd.Unavailable):
        c.list_collections()
    assert counter.n == 3
    counter.n = 0
    c._shapes["x"] = (4, "float32")  # no GetCollection first
    with pytest.raises(zoomd.Unavailable):
        c.upsert("x", [1], np.zeros((1, 4)))
    assert counter.n == 1  # writes: not retried by default
    counter.n = 0
    c.retry.retry_writes = True
    with pytest.raises(zoomd.Unavailable):
        c.upsert("x", [1], np.zeros((1, 4)))
    assert counter.n == 3
    c.close()
    sock.close()


def test_api_keys(server, tmp_path):
    admin, reader = "admin-key-0123456789abcdef", "read-key-0123456789abcdef"
    keys = tmp_path / "keys"
    keys.write_text(f"admin {admin}\nread {reader}\n")
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [os.environ.get("ZOOMD_BINARY", str(pathlib.Path(__file__).resolve().parents[3] /
                                         "build/server/main/zoomd")),
         "--data_dir", str(tmp_path / "data"), "--grpc_address", "127.0.0.1:0",
         "--metrics_address", "127.0.0.1:0", "--port_file", str(port_file),
         "--api_key_file", str(keys)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        target = f"127.0.0.1:{port_file.read_text().strip()}"
        with zoomd.Client(target, timeout=30) as anon:
            with pytest.raises(zoomd.Unauthenticated, match="requires an API key"):
                anon.list_collections()
        with zoomd.Client(target, api_key="wrong-key-0123456789", timeout=30) as bad:
            with pytest.raises(zoomd.Unauthenticated, match="not valid"):
                bad.list_collections()
        with zoomd.Client(target, api_key=admin, timeout=30) as a:
            a.create_collection("k", dim=4, metric="l2")
            a.upsert("k", [1], np.ones((1, 4)))
        with zoomd.Client(target, api_key=reader, timeout=30) as r:
            assert [h.id for h in r.search("k", np.ones(4), k=1)] == [1]
            assert r.server_version() == zoomd.__version__
            with pytest.raises(zoomd.PermissionDenied, match="admin key"):
                r.upsert("k", [2], np.ones((1, 4)))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
