"""The package installs from the repository with Debian's pip and nothing
from a package index (a venv over the system's site packages: grpcio,
protobuf, numpy come from Debian), stubs and type information included."""

import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parents[1]


def test_pip_install_without_an_index(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(HERE, src, ignore=shutil.ignore_patterns("__pycache__", "build",
                                                             "*.egg-info", "tests"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-index", "--no-deps",
                        "--no-build-isolation", "--quiet", str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = subprocess.run([str(py), "-c", "import zoomd, zoomd._proto.zoom_pb2 as z, pathlib; "
                          "p = pathlib.Path(zoomd.__file__).parent; "
                          "print(p, (p / 'py.typed').exists(), (p / '_proto' / 'zoom_pb2.pyi').exists(), "
                          "zoomd.__version__)"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path, env={})
    assert out.returncode == 0, out.stderr
    where, typed, pyi, version = out.stdout.split()
    assert where.startswith(str(venv)) and typed == "True" and pyi == "True"
    assert version == "0.1.0"
