#!/usr/bin/python3
"""Greedy decoding with stream_topk over a model in the LM directory format
(W.f32, b.f32, vocab.txt, meta.json; H.f32 and ref_ids.i32 as in
../shared/data/lm-ptb): one StreamTopK call, one message per step.

    client/python/examples/decode.py --model_dir /path/on/server/lm-ptb --steps 200

The model directory must be readable by the server (under its --models_dir
when one is set; --model_dir is then relative to it, --local_dir the same
folder as this machine sees it). There is no LSTM here to turn the chosen
word into the next context, so the loop is teacher-forced: step i sends the
recorded context H[i] (the model's state after the true words before i),
takes the greedy word and prints it beside the true next word and the exact
top-1 (ref_ids), with the agreement and the time per step.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import zoomd  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="127.0.0.1:50051")
    ap.add_argument("--api_key", default=None)
    ap.add_argument("--model_dir", required=True, help="the directory as the server names it")
    ap.add_argument("--local_dir", default=None, help="the same directory here (default: "
                    "--model_dir)")
    ap.add_argument("--name", default="lm")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--ef", type=int, default=0)
    ap.add_argument("--show", type=int, default=20, help="steps printed")
    a = ap.parse_args()

    local = pathlib.Path(a.local_dir or a.model_dir)
    meta = json.loads((local / "meta.json").read_text())
    d = int(meta["dim"])
    vocab = (local / "vocab.txt").read_text().split("\n")
    H = np.fromfile(local / "H.f32", dtype="<f4").reshape(-1, d)
    ref = np.fromfile(local / "ref_ids.i32", dtype="<i4").reshape(len(H), -1)
    steps = min(a.steps, len(H))

    client = zoomd.Client(a.target, api_key=a.api_key, timeout=900)
    info = client.load_model(a.name, a.model_dir, wait=True)
    print(f"model {info.name}: |V| {info.vocab_size:,}, d {info.dim}, graph "
          f"{info.graph_bytes / 2**20:.1f} MiB ({'cached' if info.graph_from_cache else 'built'})")
    agree_exact = agree_true = 0
    times = []
    with client.stream_topk(a.name, k=a.k, ef=a.ef, return_words=True,
                            return_probs=True) as stream:
        for i in range(steps):
            t = time.perf_counter()
            step = stream.step(H[i])
            times.append(time.perf_counter() - t)
            greedy = int(step.ids[0])
            agree_exact += greedy == int(ref[i, 1])
            agree_true += greedy == int(ref[i, 0])
            if i < a.show:
                print(f"{i:4d}  greedy {step.words[0]!r:>14} p(among k)={step.probs[0]:.3f}  "
                      f"true {vocab[ref[i, 0]]!r:>14}  exact top-1 {vocab[ref[i, 1]]!r:>14}  "
                      f"tail {step.tail_mass:.3f}")
    t = np.array(times) * 1e6
    print(f"{steps} steps: greedy = exact top-1 in {agree_exact / steps:.1%}, = the true next "
          f"word in {agree_true / steps:.1%}; per step p50 {np.median(t):.0f} us, "
          f"p99 {np.percentile(t, 99):.0f} us (round trip through gRPC)")


if __name__ == "__main__":
    main()
