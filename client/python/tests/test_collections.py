"""Collections and the server: every call's round trip."""

import time

import pytest

import zoomd


def test_health_version_and_server_info(client):
    assert client.health() == "SERVING"
    info = client.server_info()
    assert info.version == zoomd.__version__  # the server's and the client's: one project
    assert client.server_version() == info.version
    assert info.simd_level in ("avx512", "avx2", "scalar")
    assert 0 < info.started_unix_ms <= time.time() * 1000


def test_create_get_list_drop(client, name):
    spec = zoomd.IndexSpec(kind="hnsw_pq", m=12, ef_construction=80, pq_m=8)
    info = client.create_collection(name, dim=32, metric="ip", dtype="float32", index=spec,
                                    default_knobs={"ef": 40, "rerank": 30})
    assert (info.name, info.dim, info.metric, info.dtype) == (name, 32, "ip", "float32")
    assert info.index.kind == "hnsw_pq" and info.index.m == 12 and info.index.pq_m == 8
    assert info.default_knobs.ef == 40 and info.default_knobs.rerank == 30
    assert info.points == 0 and info.index_state == "none"
    got = client.get_collection(name)
    assert got.index == info.index and got.default_knobs == info.default_knobs
    assert name in [c.name for c in client.list_collections()]
    client.drop_collection(name)
    assert name not in [c.name for c in client.list_collections()]
    with pytest.raises(zoomd.NotFound):
        client.get_collection(name)


def test_a_collection_sets_its_own_cache(client, name):
    info = client.create_collection(name, dim=8, metric="l2", cache_bytes=1 << 20)
    assert info.cache_bytes == 1 << 20
    assert info.resident_bytes > 900 << 10  # allocated with the collection
    assert client.get_collection(name).cache_bytes == 1 << 20
    with pytest.raises(zoomd.InvalidArgument, match="--max_cache_bytes"):
        client.create_collection(name + "_huge", dim=8, metric="l2", cache_bytes=1 << 50)
    with pytest.raises(zoomd.InvalidArgument, match="cache_bytes: expected"):
        client.create_collection(name + "_neg", dim=8, metric="l2", cache_bytes=-1)
    client.drop_collection(name)


def test_build_compact_and_field_indexes(client, name, sift):
    client.create_collection(name, dim=128, metric="l2", dtype="uint8")
    client.import_points(name, sift["base"][:2000], progress=False)
    info = client.build_index(name, wait=True)
    assert info.index_state == "ready" and info.indexed_points == 2000
    assert info.resident_bytes > 0 and info.disk_bytes > 0
    assert client.delete(name, ids=list(range(100))) == 100
    info = client.compact(name)
    assert client.get_collection(name).points == 1900
    info = client.create_field_index(name, "tag", "keyword", wait=True)
    fi = {f.field: f for f in info.field_indexes}
    assert fi["tag"].type == "keyword" and fi["tag"].ready
    info = client.delete_field_index(name, "tag")
    assert "tag" not in [f.field for f in info.field_indexes]


def test_snapshots(client, name):
    client.create_collection(name, dim=4, metric="l2")
    client.upsert(name, [1, 2, 3], [[0, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0]])
    snap = client.create_snapshot(name)
    assert snap.collection == name and snap.points == 3 and len(snap.sha256) == 64
    assert [s.name for s in client.list_snapshots(name)] == [snap.name]
    client.delete_snapshot(name, snap.name)
    assert client.list_snapshots(name) == []
    with pytest.raises(zoomd.NotFound):
        client.delete_snapshot(name, snap.name)


def test_a_rabitq_collection(client, name, sift):
    spec = zoomd.IndexSpec(quantizer="rabitq")
    info = client.create_collection(name, dim=128, metric="l2", dtype="uint8", index=spec)
    assert info.index.quantizer == "rabitq"
    assert (info.index.pq_m, info.index.pq_nbits) == (128, 4)  # one 4-bit level a dimension
    client.import_points(name, sift["base"][:2000], progress=False)
    assert client.build_index(name, wait=True).index_state == "ready"
    hits = client.search(name, sift["base"][7], k=5, nprobe=64, rerank=20)
    assert hits.ids[0] == 7 and hits.scores[0] == 0  # exact scores after the fullview
    assert client.get_collection(name).index == info.index
    with pytest.raises(zoomd.InvalidArgument, match="needs index kind ivf_hnsw_pq"):
        client.create_collection(name + "_h", dim=8, metric="l2",
                                 index=zoomd.IndexSpec(kind="hnsw_pq", quantizer="rabitq"))
    with pytest.raises(zoomd.InvalidArgument, match="unknown quantizer 'sq8'"):
        client.create_collection(name + "_s", dim=8, metric="l2",
                                 index=zoomd.IndexSpec(quantizer="sq8"))
    client.drop_collection(name)
