"""import_points: arrays, .fvecs files and iterators, with progress."""

import numpy as np
import pytest

import zoomd


def test_import_100k_points_with_progress(client, name, capsys):
    n, dim = 100_000, 32
    x = np.random.default_rng(5).random((n, dim), dtype=np.float32)
    client.create_collection(name, dim=dim, metric="l2")
    r = client.import_points(name, x, progress=True)
    assert r.imported == n and r.seconds > 0 and r.points_per_s > 0
    err = capsys.readouterr().err
    assert f"{n:,} points in" in err and "points/s" in err
    assert client.count(name) == n
    np.testing.assert_array_equal(client.get(name, [n - 1], with_vectors=True)[0].vector,
                                  x[n - 1])


def test_import_from_fvecs_and_iterators(client, name, tmp_path):
    dim = 12
    x = np.random.default_rng(6).random((2500, dim), dtype=np.float32)
    path = tmp_path / "x.fvecs"
    rows = np.empty((2500, dim + 1), dtype=np.float32)
    rows[:, 0] = np.array([dim], dtype=np.int32).view(np.float32)[0]
    rows[:, 1:] = x
    rows.tofile(path)
    np.testing.assert_array_equal(zoomd.read_fvecs(path), x)
    client.create_collection(name, dim=dim, metric="l2")
    assert client.import_points(name, path, progress=False, batch_size=1000).imported == 2500
    assert client.count(name) == 2500
    # An iterator of (ids, vectors, payloads) batches.
    batches = ((list(range(10000 + i * 100, 10100 + i * 100)), x[i * 100:(i + 1) * 100],
                [{"b": i}] * 100) for i in range(5))
    assert client.import_points(name, batches, progress=False).imported == 500
    assert client.count(name, {"must": [{"key": "b", "match": {"value": 4}}]}) == 100


def test_a_bad_batch_fails_the_import_loudly(client, name):
    dim = 4
    client.create_collection(name, dim=dim, metric="l2")
    good = np.zeros((100, dim), dtype=np.float32)
    bad = np.full((100, dim), np.nan, dtype=np.float32)
    # A bad first batch: nothing is sent at all.
    with pytest.raises(zoomd.InvalidArgument, match="NaN"):
        client.import_points(name, iter([bad, good]), progress=False)
    assert client.count(name) == 0
    # A bad batch after a good one: the error surfaces and nothing after it
    # is sent. (Whether the good batch before it lands depends on when the
    # cancel reaches the server: only the bound is guaranteed.)
    with pytest.raises(zoomd.InvalidArgument, match="NaN"):
        client.import_points(name, iter([good, bad, good]), progress=False)
    assert client.count(name) <= 100


def test_read_vecs_rejects_malformed_files(tmp_path):
    p = tmp_path / "t.fvecs"
    p.write_bytes(np.array([4, 0, 0, 0, 0, 4, 0], dtype=np.int32).tobytes())
    with pytest.raises(zoomd.InvalidArgument, match="whole number of rows"):
        zoomd.read_fvecs(p)
    p.write_bytes(np.array([2, 0, 0, 3, 0, 0], dtype=np.int32).tobytes())
    with pytest.raises(zoomd.InvalidArgument, match="row 1 declares dimension 3"):
        zoomd.read_fvecs(p)
    with pytest.raises(zoomd.InvalidArgument, match="unknown vector file type"):
        zoomd.read_vecs(tmp_path / "x.npy")
