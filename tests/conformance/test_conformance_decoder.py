"""API conformance (issue 46): the Decoder. LoadModel, UnloadModel,
ListModels, TopK and StreamTopK: their error cases, then their happy paths."""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import pytest

from conformance_data import MODEL_D, MODEL_V, assert_scores, close, topk
from conformance_drift import over_backends
from conformance_harness import (Case, Env, Err, both, check, covers, env_fresh, error_params,
                                 normalise, ok, outcome, run_error_case)
import backends as B
from zoomd._proto import decoder_pb2 as dpb


ERROR_CASES: List[Case] = [
    # -- Decoder: LoadModel / UnloadModel
    Case("LoadModel.bad_name", "LoadModel",
         lambda: dpb.LoadModelRequest(name="bad name!", dir="tiny", wait=True),
         "INVALID_ARGUMENT", "has the character"),
    Case("LoadModel.empty_dir", "LoadModel",
         lambda: dpb.LoadModelRequest(name="m_nodir", wait=True), "INVALID_ARGUMENT",
         "the model directory is required"),
    Case("LoadModel.dir_outside", "LoadModel",
         lambda: dpb.LoadModelRequest(name="m_out", dir="../../etc", wait=True),
         "INVALID_ARGUMENT", "model directory"),
    Case("LoadModel.dir_missing", "LoadModel",
         lambda: dpb.LoadModelRequest(name="m_missing", dir="nosuch", wait=True),
         "NOT_FOUND", ""),
    Case("LoadModel.broken_files", "LoadModel",
         lambda: dpb.LoadModelRequest(name="m_broken", dir="broken", wait=True),
         "INVALID_ARGUMENT", "W.f32"),
    Case("LoadModel.default_ef_over_max", "LoadModel",
         lambda: dpb.LoadModelRequest(name="m_ef", dir="tiny", default_ef=10001, wait=True),
         "INVALID_ARGUMENT", "default_ef 10001"),
    Case("LoadModel.m_1", "LoadModel",
         lambda: dpb.LoadModelRequest(name="m_m1", dir="tiny", m=1, wait=True),
         "INVALID_ARGUMENT", ""),
    Case("LoadModel.same_again", "LoadModel",
         lambda: dpb.LoadModelRequest(name="tiny", dir="tiny", wait=True),
         "ALREADY_EXISTS", "already loaded"),
    Case("LoadModel.name_taken_other_dir", "LoadModel",
         lambda: dpb.LoadModelRequest(name="tiny", dir="tiny2", wait=True),
         "ALREADY_EXISTS", "tiny"),
    Case("UnloadModel.unknown", "UnloadModel", lambda: dpb.UnloadModelRequest(name="nosuch"),
         "NOT_FOUND", "nosuch"),
    Case("UnloadModel.bad_name", "UnloadModel", lambda: dpb.UnloadModelRequest(name="bad name!"),
         "NOT_FOUND", ""),
    # -- TopK
    Case("TopK.no_contexts", "TopK", lambda: topk(contexts=[]), "INVALID_ARGUMENT",
         "no contexts to decode"),
    Case("TopK.too_many_contexts", "TopK",
         lambda: topk(contexts=[dpb.Context(h=[0.1] * MODEL_D)] * 4097), "INVALID_ARGUMENT",
         "4097"),
    Case("TopK.k_0", "TopK", lambda: topk(k=0), "INVALID_ARGUMENT", "k must be at least 1"),
    Case("TopK.k_over_max", "TopK", lambda: topk(k=1001), "INVALID_ARGUMENT", "k 1001"),
    Case("TopK.k_over_vocab", "TopK", lambda: topk(k=MODEL_V + 1), "INVALID_ARGUMENT",
         "the model's |V|"),
    Case("TopK.ef_over_max", "TopK", lambda: topk(ef=10001), "INVALID_ARGUMENT", "ef 10001"),
    Case("TopK.wrong_dim", "TopK", lambda: topk(contexts=[dpb.Context(h=[0.1] * 3)]),
         "INVALID_ARGUMENT", "context #0 has 3 floats"),
    Case("TopK.nan", "TopK", lambda: topk(contexts=[dpb.Context(h=[float("nan")] * MODEL_D)]),
         "INVALID_ARGUMENT", "context #0"),
    Case("TopK.bad_tail", "TopK", lambda: topk(tail=9), "INVALID_ARGUMENT",
         "is not a TailEstimate"),
    Case("TopK.unknown_model", "TopK", lambda: topk(model="nosuch"), "NOT_FOUND", "nosuch"),
    Case("TopK.bad_model_name", "TopK", lambda: topk(model="bad name!"), "NOT_FOUND", ""),
    # -- StreamTopK: the step's error ends the stream, naming the step
    Case("StreamTopK.second_step_wrong_dim", "StreamTopK",
         lambda: [topk(), topk(contexts=[dpb.Context(h=[0.1] * 3)])], "INVALID_ARGUMENT",
         "step 1: context #0 has 3 floats"),
    Case("StreamTopK.unknown_model", "StreamTopK", lambda: [topk(model="nosuch")],
         "NOT_FOUND", "step 0: "),
    Case("StreamTopK.k_0", "StreamTopK", lambda: [topk(k=0)], "INVALID_ARGUMENT",
         "step 0: k must be at least 1"),
]
assert len({c.id for c in ERROR_CASES}) == len(ERROR_CASES)


@pytest.mark.parametrize("case,bname", error_params(ERROR_CASES))
def test_error(case: Case, bname: str, env: Env) -> None:
    run_error_case(case, bname, env)


# ---- happy paths -----------------------------------------------------------------------------


def model_view(m: dpb.ModelInfo) -> Dict[str, Any]:
    """What a model is, not where its bytes are (graph bytes differ with the build)."""
    return {"name": m.name, "dir": m.dir, "vocab_size": m.vocab_size, "dim": m.dim,
            "state": m.state, "m": m.m, "ef_construction": m.ef_construction,
            "default_ef": m.default_ef, "default_ef_source": m.default_ef_source,
            "calibration_error": m.calibration_error, "error": m.error}


@covers("ListModels")
@pytest.mark.parametrize("bname", over_backends("ListModels"))
def test_list_models(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        got = ok(outcome(x, "ListModels", dpb.ListModelsRequest())).models
        tiny = [model_view(m) for m in got if m.name == "tiny"]
        assert len(tiny) == 1 and tiny[0]["state"] == dpb.SERVING
        assert (tiny[0]["vocab_size"], tiny[0]["dim"]) == (MODEL_V, MODEL_D)
        return tiny
    check(b, ref, run)


@covers("LoadModel", "UnloadModel")
@pytest.mark.parametrize("bname", over_backends("LoadModel+UnloadModel"))
def test_load_and_unload_model(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = env_fresh("lm")
        loaded = ok(outcome(x, "LoadModel", dpb.LoadModelRequest(
            name=name, dir="tiny2", m=8, ef_construction=40, default_ef=24, wait=True),
            timeout=120)).info
        assert loaded.state == dpb.SERVING and loaded.m == 8 and loaded.default_ef == 24
        assert loaded.default_ef_source == "request" and loaded.graph_bytes > 0
        listed = [m.name for m in ok(outcome(x, "ListModels", dpb.ListModelsRequest())).models]
        r = ok(outcome(x, "TopK", topk(model=name, k=3, exact=True)))
        ok(outcome(x, "UnloadModel", dpb.UnloadModelRequest(name=name)))
        after = [m.name for m in ok(outcome(x, "ListModels", dpb.ListModelsRequest())).models]
        assert name in listed and name not in after
        view = model_view(loaded) | {"name": None}
        return [view, list(r.results[0].ids)]
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("UnloadModel.then_TopK"))
def test_topk_after_unload_model(env: Env, bname: str) -> None:
    """Once UnloadModel has answered, the model is gone: TopK is NOT_FOUND, with
    the message of an unknown model (the same name on both backends)."""
    b, ref = both(env, bname)
    name = env_fresh("um")

    def run(x: B.Backend):
        ok(outcome(x, "LoadModel", dpb.LoadModelRequest(name=name, dir="tiny2", wait=True),
                   timeout=120))
        ok(outcome(x, "UnloadModel", dpb.UnloadModelRequest(name=name)))
        gone = outcome(x, "TopK", topk(model=name))
        assert isinstance(gone, Err) and gone.code == "NOT_FOUND", gone
        return [gone.code, normalise(gone.message)]
    check(b, ref, run)


def softmax_all(model, h):
    z = h.astype(np.float64) @ model["W"].T.astype(np.float64) + model["b"]
    p = np.exp(z - z.max(axis=1, keepdims=True))
    return z, p / p.sum(axis=1, keepdims=True)


CONTEXTS = np.random.default_rng(12).standard_normal((5, MODEL_D)).astype(np.float32)


def topk_view(r: dpb.TopKResponse) -> List[Dict[str, Any]]:
    return [{"ids": list(x.ids), "words": list(x.words), "logits": list(x.logits),
             "probs": list(x.probs), "tail_mass": x.tail_mass, "ef": x.stats.ef}
            for x in r.results]


@covers("TopK")
@pytest.mark.parametrize("bname", over_backends("TopK.exact"))
def test_topk_exact(env: Env, bname: str) -> None:
    b, ref = both(env, bname)
    z, p = softmax_all(env.model, CONTEXTS)
    want = np.argsort(-z, axis=1, kind="stable")[:, :10]

    def run(x: B.Backend):
        r = ok(outcome(x, "TopK", topk(contexts=[dpb.Context(h=c.tolist()) for c in CONTEXTS],
                                       k=10, exact=True, return_words=True, return_probs=True)))
        for i, res in enumerate(r.results):
            assert list(res.ids) == want[i].tolist()
            assert list(res.words) == [f"w{j}" for j in want[i]]
            assert_scores(list(res.logits), z[i, want[i]].tolist())
            assert_scores(list(res.probs), p[i, want[i]].tolist())
            assert close(res.tail_mass, 1 - p[i, want[i]].sum(), abs_=1e-5)
            assert res.stats.ef == 0
        return topk_view(r)
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("TopK.graph"))
def test_topk_graph(env: Env, bname: str) -> None:
    """ef = |V|: the graph visits every word, so the top-k is the exact one."""
    b, ref = both(env, bname)
    z, p = softmax_all(env.model, CONTEXTS)
    want = np.argsort(-z, axis=1, kind="stable")[:, :5]

    def run(x: B.Backend):
        out = []
        for tail in (dpb.TAIL_ESTIMATE_NONE, dpb.TAIL_ESTIMATE_SAMPLE):
            r = ok(outcome(x, "TopK", topk(
                contexts=[dpb.Context(h=c.tolist()) for c in CONTEXTS], k=5, ef=MODEL_V,
                tail=tail, tail_samples=MODEL_V)))
            for i, res in enumerate(r.results):
                assert list(res.ids) == want[i].tolist()
                assert_scores(list(res.logits), z[i, want[i]].tolist())
                assert not res.words and not res.probs and res.stats.ef == MODEL_V
                if tail == dpb.TAIL_ESTIMATE_NONE:
                    assert res.tail_mass == 0
                else:
                    assert close(res.tail_mass, 1 - p[i, want[i]].sum(), rel=1e-3, abs_=1e-4)
            out.append(topk_view(r))
        return out
    check(b, ref, run)


@covers("StreamTopK")
@pytest.mark.parametrize("bname", over_backends("StreamTopK"))
def test_stream_topk(env: Env, bname: str) -> None:
    b, ref = both(env, bname)
    z, _ = softmax_all(env.model, CONTEXTS)

    def run(x: B.Backend):
        steps = [topk(contexts=[dpb.Context(h=c.tolist())], k=3, exact=True, return_words=True)
                 for c in CONTEXTS]
        got = ok(outcome(x, "StreamTopK", steps))
        assert len(got) == len(CONTEXTS)
        for i, r in enumerate(got):
            assert list(r.results[0].ids) == np.argsort(-z[i], kind="stable")[:3].tolist()
        none = ok(outcome(x, "StreamTopK", []))
        assert none == []
        return [topk_view(r) for r in got]
    check(b, ref, run)
