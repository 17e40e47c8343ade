"""The Decoder: load a model, topk against brute force, stream_topk for a
50-step loop (sync and asyncio)."""

import time

import numpy as np
import pytest

import zoomd
from conftest import MODEL_D, MODEL_V


def brute_topk(model, h, k):
    z = h @ model["W"].T + model["b"]
    return np.argsort(-z, axis=1)[:, :k]


@pytest.fixture(scope="module")
def model(server):
    with zoomd.Client(server.target, timeout=300) as c:
        info = c.load_model("tiny", "tiny", wait=True)
        assert info.state == "serving" and info.vocab_size == MODEL_V and info.dim == MODEL_D
    yield server.model


def test_topk_matches_brute_force(client, model):
    assert "tiny" in [m.name for m in client.list_models()]
    h = np.random.default_rng(2).standard_normal((20, MODEL_D)).astype(np.float32)
    want = brute_topk(model, h, 10)
    r = client.topk("tiny", h, k=10, exact=True, return_words=True, return_probs=True)
    assert r.ids.shape == (20, 10) and r.ids.dtype == np.uint32
    np.testing.assert_array_equal(r.ids, want)
    assert r.words[0] == [f"w{i}" for i in want[0]]
    assert r.probs.shape == (20, 10) and np.all(r.tail_mass >= 0) and np.all(r.tail_mass <= 1)
    g = client.topk("tiny", h, k=10, ef=200)
    hits = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(g.ids, want)])
    assert hits >= 0.9, hits
    assert g.probs is None and g.words is None
    with pytest.raises(zoomd.InvalidArgument):
        client.topk("tiny", np.zeros((1, MODEL_D + 1)))  # the server checks the model's dim
    with pytest.raises(zoomd.NotFound):
        client.topk("nope", h)


def exact_tail(model, h, ids):
    z = h @ model["W"].T + model["b"]
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return 1.0 - np.take_along_axis(p, ids.astype(np.int64), axis=1).sum(axis=1)


def test_topk_tail_estimates(client, model):
    h = np.random.default_rng(4).standard_normal((20, MODEL_D)).astype(np.float32)
    clusters = client.topk("tiny", h, k=10, ef=64, return_probs=True)
    assert np.all(clusters.tail_mass > 0) and np.all(clusters.tail_mass < 1)
    assert np.mean(np.abs(clusters.tail_mass - exact_tail(model, h, clusters.ids))) < 0.05
    named = client.topk("tiny", h, k=10, ef=64, return_probs=True, tail="clusters")
    np.testing.assert_array_equal(named.tail_mass, clusters.tail_mass)
    none = client.topk("tiny", h, k=10, ef=64, return_probs=True, tail="none")
    assert np.all(none.tail_mass == 0)
    np.testing.assert_array_equal(none.ids, clusters.ids)
    every = client.topk("tiny", h, k=10, ef=64, return_probs=True, tail="sample",
                        tail_samples=MODEL_V)
    np.testing.assert_allclose(every.tail_mass, exact_tail(model, h, every.ids), atol=1e-4)
    with pytest.raises(zoomd.InvalidArgument, match="tail"):
        client.topk("tiny", h, tail="bogus")


def greedy(step_fn, steps, rng):
    h = rng.standard_normal(MODEL_D).astype(np.float32)
    words = []
    for _ in range(steps):
        s = step_fn(h)
        words.append(int(s.ids[0]))
        h = 0.5 * h + rng.standard_normal(MODEL_D).astype(np.float32)
    return words


def test_stream_topk_50_steps(client, model):
    rng = np.random.default_rng(9)
    with client.stream_topk("tiny", k=5, ef=100, return_probs=True, return_words=True) as s:
        words = greedy(s.step, 50, rng)
        assert s.steps == 50
    assert len(words) == 50
    with client.stream_topk("tiny", k=5) as s:
        step = s.step(np.ones(MODEL_D))
        assert step.ids.shape == (5,) and step.probs is None
    # The same contexts, one TopK call each: the same words.
    rng = np.random.default_rng(9)
    unary = greedy(lambda h: type("S", (), {"ids": client.topk("tiny", h[None, :], k=5,
                                                                ef=100).ids[0]}), 50, rng)
    assert unary == words


@pytest.mark.asyncio
async def test_async_stream_topk(server, model):
    async with zoomd.AsyncClient(server.target, timeout=120) as a:
        async with a.stream_topk("tiny", k=3, return_words=True) as s:
            for i in range(50):
                step = await s.step(np.full(MODEL_D, 0.01 * i, np.float32))
                assert len(step.words) == 3
        r = await a.topk("tiny", np.ones((2, MODEL_D)), k=3)
        assert r.ids.shape == (2, 3)


def test_load_and_unload_another_model(client, model):
    info = client.load_model("tiny_unload", "tiny", m=8, ef_construction=40, wait=True)
    assert info.state == "serving" and info.m == 8 and info.graph_bytes > 0
    client.unload_model("tiny_unload")
    assert "tiny_unload" not in [m.name for m in client.list_models()]
    with pytest.raises(zoomd.NotFound):
        client.unload_model("tiny_unload")
    with pytest.raises(zoomd.InvalidArgument):
        client.load_model("bad", "../../etc")  # outside --models_dir


def test_a_failed_load_says_its_code(client, server, model):
    """A model whose files do not agree fails to load: loaded without wait,
    its ModelInfo says model_failed, why, and the load's own gRPC code (3,
    INVALID_ARGUMENT), the code LoadModel with wait answers."""
    broken = server.models / "broken"
    broken.mkdir()
    for f in ("W.f32", "b.f32", "vocab.txt", "meta.json"):
        (broken / f).write_bytes((server.models / "tiny" / f).read_bytes())
    (broken / "W.f32").write_bytes(b"\0" * 12)  # not vocab_size x dim floats
    try:
        with pytest.raises(zoomd.InvalidArgument):
            client.load_model("broken", "broken", wait=True)
        try:
            client.load_model("broken", "broken", wait=False)
        except zoomd.InvalidArgument:
            pytest.skip("this server checks the files before it answers a load without wait")
        deadline = time.monotonic() + 60
        while True:
            info = [m for m in client.list_models() if m.name == "broken"]
            if info and info[0].state == "model_failed":
                break
            assert time.monotonic() < deadline, info
            time.sleep(0.05)
        assert info[0].error and info[0].error_code == 3, info[0]
    finally:
        try:
            client.unload_model("broken")
        except zoomd.NotFound:
            pass


def test_default_ef_calibrated_or_asked_for(client, model):
    # The tiny model directory has H.f32 (64 contexts): its default ef was
    # measured at load. Its random 32-d rows are hard for the graph (at ef
    # 512 one context of 64 may still miss its top word, and the graph is
    # built on 2 threads, so runs differ): either outcome is checked for
    # what it reports.
    info = next(m for m in client.list_models() if m.name == "tiny")
    assert info.calibration_contexts == 64
    if info.default_ef_source == "calibrated":
        assert info.calibration_error == "" and info.default_ef >= 10
        assert info.calibration_p1 >= 0.99 and info.calibration_p5 >= 0.98
    else:
        assert info.default_ef_source == "builtin" and info.default_ef == 0
        assert "no ef up to 512 reached" in info.calibration_error
    asked = client.load_model("tiny_ef", "tiny", wait=True, default_ef=24)
    assert asked.default_ef == 24 and asked.default_ef_source == "request"
    client.unload_model("tiny_ef")
    for bad in (-1, 2**32, 1.5, True):
        with pytest.raises(zoomd.InvalidArgument, match="default_ef"):
            client.load_model("tiny_ef", "tiny", default_ef=bad)
