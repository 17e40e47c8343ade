"""API conformance (issue 46): every RPC of both services has its cases, across
the suite's test modules."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType
from typing import Dict, List

from conformance_harness import HAPPY, Case
from zoomd._proto import decoder_pb2 as dpb
from zoomd._proto import zoom_pb2 as pb

HERE = pathlib.Path(__file__).resolve().parent

# RPCs whose request has no field to get wrong.
NO_INPUT = {"GetServerInfo", "ListCollections", "ListModels"}


def suite_modules() -> List[ModuleType]:
    """Every test_*.py of the suite: as pytest imported it, else (only some of
    the files were asked for) imported here. Importing one registers its
    happy-path tests in HAPPY (`covers`); each holds its ERROR_CASES."""
    loaded: Dict[pathlib.Path, ModuleType] = {}
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str) and f.endswith(".py"):
            loaded[pathlib.Path(f).resolve()] = m
    out = []
    for path in sorted(HERE.glob("test_*.py")):
        mod = loaded.get(path)
        if mod is None:
            spec = importlib.util.spec_from_file_location(f"conformance_{path.stem}", path)
            assert spec is not None and spec.loader is not None, path
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        out.append(mod)
    return out


def test_every_rpc_has_cases() -> None:
    """Each method of both services (from the protos) has a happy-path test and,
    unless its request is empty, error cases."""
    methods = [m.name for svc in (pb.DESCRIPTOR.services_by_name["VectorSearch"],
                                  dpb.DESCRIPTOR.services_by_name["Decoder"])
               for m in svc.methods]
    assert len(methods) == 29, methods
    cases: List[Case] = [c for m in suite_modules() for c in getattr(m, "ERROR_CASES", [])]
    assert len({c.id for c in cases}) == len(cases)  # unique across the files too
    errors = {c.rpc for c in cases}
    assert [m for m in methods if m not in HAPPY] == []
    assert [m for m in methods if m not in errors and m not in NO_INPUT] == []
