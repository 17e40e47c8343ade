"""Reading the TEXMEX vector formats (.fvecs float32, .bvecs uint8, .ivecs
int32: each row a little-endian int32 dimension, then the components),
memory-mapped: a 1-million-row file costs no RAM until rows are touched."""

from __future__ import annotations

import os
from typing import Optional, Union

import numpy as np

from zoomd.errors import invalid

__all__ = ["read_vecs", "read_fvecs", "read_bvecs", "read_ivecs"]

PathLike = Union[str, "os.PathLike[str]"]

_KINDS = {".fvecs": (np.dtype("<f4"), 4), ".bvecs": (np.dtype("u1"), 1),
          ".ivecs": (np.dtype("<i4"), 4)}


def read_vecs(path: PathLike, limit: Optional[int] = None) -> np.ndarray:
    """The rows of an .fvecs / .bvecs / .ivecs file as an (n, dim) array view
    (memory-mapped, read-only), the first `limit` rows if given. Raises
    InvalidArgument for a file whose size or row headers do not fit the format."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in _KINDS:
        raise invalid(f"{path}: unknown vector file type {ext!r}; use .fvecs, .bvecs or .ivecs")
    dtype, width = _KINDS[ext]
    size = os.path.getsize(path)
    if size < 4:
        raise invalid(f"{path}: empty or truncated (no row header)")
    with open(path, "rb") as f:
        dim = int(np.frombuffer(f.read(4), dtype="<i4")[0])
    if dim <= 0 or dim > 1 << 20:
        raise invalid(f"{path}: row 0 declares dimension {dim}")
    row_bytes = 4 + dim * width
    if size % row_bytes != 0:
        raise invalid(f"{path}: {size} bytes is not a whole number of rows of dimension {dim} "
                      f"({row_bytes} bytes each)")
    n = size // row_bytes
    if limit is not None:
        n = min(n, int(limit))
    raw = np.memmap(path, dtype=np.uint8, mode="r", shape=(n, row_bytes))
    heads = raw[:, :4].copy().view("<i4").reshape(n)
    if n and not (heads == dim).all():
        bad = int(np.argmax(heads != dim))
        raise invalid(f"{path}: row {bad} declares dimension {int(heads[bad])}, row 0 {dim}")
    return raw[:, 4:].view(dtype).reshape(n, dim)


def read_fvecs(path: PathLike, limit: Optional[int] = None) -> np.ndarray:
    """An .fvecs file's rows, (n, dim) float32."""
    return read_vecs(path, limit)


def read_bvecs(path: PathLike, limit: Optional[int] = None) -> np.ndarray:
    """A .bvecs file's rows, (n, dim) uint8."""
    return read_vecs(path, limit)


def read_ivecs(path: PathLike, limit: Optional[int] = None) -> np.ndarray:
    """An .ivecs file's rows (e.g. ground-truth neighbour ids), (n, k) int32."""
    return read_vecs(path, limit)
