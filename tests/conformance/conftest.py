"""The API conformance suite (issue 46): every RPC of zoom.v1.VectorSearch and
zoom.v1.Decoder - the happy path, the validation errors with their codes and
messages, limits, filters, payloads, paging - against a standalone zoomd and
against a router with nodes (S = 2 shards, R = 2 replicas), through the raw
stubs (the Python client validates on its side first; this suite must reach
the server).

Each case runs on each backend (`-k standalone`, `-k cluster`):
  * on both it is checked against what the proto promises and, where there
    is one, a numpy oracle over the same deterministic data (exact ids,
    scores within 1e-4 relative, counts);
  * on the cluster it is also compared with the standalone's answer to the
    same request: the same status code and the same message (after
    `normalise`: a node's replica name `<collection>_s<k>_<uid8>` reads as
    the collection's name; nothing else is rewritten), the same ids, scores
    and counts.

Where the router answers differently today, the cluster's case is
`xfail(strict=True)` with the reason in DRIFT (conformance_drift.py): the
suite is green now and turns red when a difference is fixed (then its entry
goes). DRIFT is the inventory of the differences.

Cluster writes are asynchronous: a write's tokens (or, for writes that give
none, a barrier write's) are waited for on every replica (backends.py:
`sync`, `barrier`) before anything is read back. Bounded waits only.

The files:
  * backends.py             the two backends (processes, stubs, sync, barrier);
  * conformance_drift.py    DRIFT, and the backends' parameters it marks xfail;
  * conformance_data.py     the data, the models, the numpy oracle, request builders;
  * conformance_harness.py  calls and outcomes, normalise, Env (the backends,
                            filled), the error cases' machinery, comparisons;
  * conftest.py             the `env` fixture: the backends, once per session;
  * test_conformance_{collections,points,search,snapshots,decoder}.py
                           each concern's error cases (its ERROR_CASES, run by
                            its test_error) and happy paths;
  * test_rpc_coverage.py    every RPC has its cases, across those files.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Iterator

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
# conformance_harness first: it puts the client's protos on sys.path.
from conformance_harness import Env  # noqa: E402
import backends as B  # noqa: E402


@pytest.fixture(scope="session")
def env() -> Iterator[Env]:
    """The backends for the whole session: each is started (and filled) by the
    first case that needs it, whichever file that case is in, and stopped at
    the end - not once per file."""
    root = B.temp_root("zoom-conformance-")
    e = Env(root)
    try:
        yield e
    finally:
        e.stop()
        B.remove_root(root)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failed case's report carries the tail of every started backend's
    process logs (a failure seen only in CI is otherwise a bare status)."""
    outcome = yield
    rep = outcome.get_result()
    e = item.funcargs.get("env") if hasattr(item, "funcargs") else None
    if rep.when == "call" and rep.failed and isinstance(e, Env):
        for name, b in e.backends.items():
            rep.sections.append((f"{name}: the processes' logs (tails)", b.logs(40)))
