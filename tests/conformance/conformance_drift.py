"""The drift inventory of the API conformance suite (issue 46): what the
router answers differently from the standalone today, case by case, and the
backends' parameters that turn an entry into a strict xfail of the cluster's
case. DRIFT lives here only: every test module takes its backends from
`over_backends` / `keyed_over_backends`.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

import pytest

# ---- drift: what the router answers differently today ----------------------------------
# case id -> what differs (read against main at 8792410, the redesign's inventory;
# 56 of its 73 went when the router became a backend of the one adapter). A cluster
# case listed here is xfail(strict=True): when the router is fixed, the case passes,
# the xfail turns it red, and its entry goes.

DRIFT: Dict[str, str] = {
    # Empty. The last entries went with issue 47: the counts of ids sent with write
    # concerns (under MAJORITY, the default, the replicas report the points each entry
    # changed), the snapshots with the router's cluster snapshots (ClusterSnapshots).
}

BACKENDS = ["standalone", "cluster"]


def keyed_over_backends(prefix: str, keys: Iterable[str]) -> List[Any]:
    """(key, backend) parameters, the case id of each `prefix.key`."""
    out = []
    for key in keys:
        for p in over_backends(f"{prefix}.{key}"):
            out.append(pytest.param(key, p.values[0], marks=p.marks, id=f"{p.values[0]}-{key}"))
    return out


def over_backends(case_id: str) -> List[Any]:
    """The two backends as parameters, the cluster's marked when DRIFT names the case."""
    out = []
    for b in BACKENDS:
        marks = []
        if b == "cluster" and case_id in DRIFT:
            marks.append(pytest.mark.xfail(strict=True,
                                           reason=f"issue 46: router drift: {DRIFT[case_id]}"))
        out.append(pytest.param(b, marks=marks, id=b))
    return out

