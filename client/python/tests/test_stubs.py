"""The committed stubs (zoomd/_proto) are what tools/gen_protos.sh makes of
the repository's protos: a proto change without regenerated stubs fails here."""

import filecmp
import pathlib
import shutil
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parents[1]


def test_stubs_match_the_protos(tmp_path):
    if not (shutil.which("protoc") and shutil.which("grpc_python_plugin")):
        pytest.fail("protoc and grpc_python_plugin are needed (protobuf-compiler, "
                    "protobuf-compiler-grpc)", pytrace=False)
    subprocess.run(["bash", str(HERE / "tools" / "gen_protos.sh"), str(tmp_path)], check=True)
    committed = HERE / "zoomd" / "_proto"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(p.name for p in committed.iterdir() if p.name != "__pycache__")
    stale = [n for n in names if not filecmp.cmp(tmp_path / n, committed / n, shallow=False)]
    assert not stale, f"regenerate with client/python/tools/gen_protos.sh: {stale} differ"
