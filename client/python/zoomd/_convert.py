"""Conversions between Python values and zoomd's protos, with the client-side
checks (shapes, dimensions, NaN, payload types) that run before a request
goes out, and the wire encoding of vectors (numpy bytes straight into the
protobuf encoding: packed floats are little-endian float32)."""

from __future__ import annotations

import difflib
import math
import re
import reprlib
import struct
from collections import abc
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import numpy as np

from zoomd._proto import decoder_pb2, zoom_pb2
from zoomd.errors import invalid
from zoomd.models import (Calibration, CalibrationPoint, CollectionInfo, FieldIndexInfo,
                          GeoPoint, IndexSpec, ModelInfo, Payload, QueryStats, Record,
                          ScoredPoint, SearchKnobs, SearchResult, ServerInfo, WriteToken)

FilterLike = Union[None, Mapping[str, Any], zoom_pb2.Filter]

_METRICS = {"l2": zoom_pb2.L2, "euclid": zoom_pb2.L2, "ip": zoom_pb2.INNER_PRODUCT,
            "inner_product": zoom_pb2.INNER_PRODUCT, "dot": zoom_pb2.INNER_PRODUCT,
            "cosine": zoom_pb2.COSINE}
_METRIC_NAMES = {zoom_pb2.L2: "l2", zoom_pb2.INNER_PRODUCT: "ip", zoom_pb2.COSINE: "cosine"}
_DTYPES = {"float32": zoom_pb2.FLOAT32, "uint8": zoom_pb2.UINT8}
_DTYPE_NAMES = {zoom_pb2.DTYPE_UNSPECIFIED: "float32", zoom_pb2.FLOAT32: "float32",
                zoom_pb2.UINT8: "uint8"}
_KINDS = {"ivf_hnsw_pq": zoom_pb2.IVF_HNSW_PQ, "hnsw_pq": zoom_pb2.HNSW_PQ}
_KIND_NAMES = {zoom_pb2.INDEX_KIND_UNSPECIFIED: "ivf_hnsw_pq",
               zoom_pb2.IVF_HNSW_PQ: "ivf_hnsw_pq", zoom_pb2.HNSW_PQ: "hnsw_pq"}
_QUANTIZERS = {"pq": zoom_pb2.QUANTIZER_PQ, "rabitq": zoom_pb2.QUANTIZER_RABITQ}
_QUANTIZER_NAMES = {zoom_pb2.QUANTIZER_UNSPECIFIED: "pq", zoom_pb2.QUANTIZER_PQ: "pq",
                    zoom_pb2.QUANTIZER_RABITQ: "rabitq"}
_FIELD_TYPES = {"keyword": zoom_pb2.KEYWORD, "integer": zoom_pb2.INTEGER,
                "float": zoom_pb2.FLOAT, "bool": zoom_pb2.BOOL, "geo": zoom_pb2.GEO}
_FIELD_TYPE_NAMES = {v: k for k, v in _FIELD_TYPES.items()}
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1


def _choice(kind: str, value: str, table: Mapping[str, Any]) -> Any:
    if not isinstance(value, str) or value.lower() not in table:
        raise invalid(f"unknown {kind} {value!r}; use one of {', '.join(sorted(table))}")
    return table[value.lower()]


# ---- Varints and the encoding of vectors ------------------------------------------------

def varint(n: int) -> bytes:
    """The protobuf varint of a non-negative integer."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field_bytes(number: int, data: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(data)) + data


def packed_floats(number: int, row: np.ndarray) -> bytes:
    """A packed repeated float field holding `row` (float32, C order)."""
    data = row.tobytes()
    return varint(number << 3 | 2) + varint(len(data)) + data


def query_vector(row: np.ndarray, dtype: str) -> bytes:
    """A SearchRequest's query: `vector` (field 2, floats), or for a uint8
    collection `vector_bytes` (field 14, one byte a dimension: a quarter of
    the size). `row` was checked by vector_1d (integers 0..255 for uint8)."""
    if dtype == "uint8":
        return field_bytes(14, row.astype(np.uint8).tobytes())
    return packed_floats(2, row)


# ---- Vectors ------------------------------------------------------------------------------

def _as_float32(values: Any, what: str) -> np.ndarray:
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as e:  # ragged lists
        raise invalid(f"{what}: not an array of numbers ({e})") from None
    if arr.dtype == object or arr.dtype.kind not in "fiub":
        raise invalid(f"{what}: expected numbers (float32 or uint8); got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and arr.dtype != np.float32:
        with np.errstate(over="ignore"):
            out = arr.astype(np.float32)
        if not np.isfinite(out).all() and np.isfinite(arr).all():
            raise invalid(f"{what}: values beyond float32's range (|x| > 3.4e38)")
        return np.ascontiguousarray(out, dtype="<f4")
    return np.ascontiguousarray(arr, dtype="<f4")


def _check_values(arr: np.ndarray, what: str, dtype: str) -> None:
    finite = np.isfinite(arr)
    if not finite.all():
        where = np.argwhere(~finite)[0]
        raise invalid(f"{what}: NaN or infinity at index {tuple(int(i) for i in where)}; "
                      "vectors must be finite")
    if dtype == "uint8":
        bad = (arr < 0) | (arr > 255) | (arr != np.floor(arr))
        if bad.any():
            where = np.argwhere(bad)[0]
            raise invalid(f"{what}: the collection's dtype is uint8: components must be integers "
                          f"0..255; got {float(arr[tuple(where)])} at index "
                          f"{tuple(int(i) for i in where)}", stale_shape=True)


def vector_1d(values: Any, dim: int, dtype: str, what: str = "vector") -> np.ndarray:
    """One query vector: 1-d, `dim` finite components."""
    arr = _as_float32(values, what)
    if arr.ndim != 1:
        hint = " (for several queries use search_batch)" if arr.ndim == 2 else ""
        raise invalid(f"{what}: expected a 1-d array of {dim} numbers; got shape "
                      f"{tuple(arr.shape)}{hint}")
    if arr.shape[0] != dim:
        raise invalid(f"{what}: wrong dimension: the collection has dim {dim}; got {arr.shape[0]}",
                      stale_shape=True)
    _check_values(arr, what, dtype)
    return arr


def matrix_2d(values: Any, dim: int, dtype: str, what: str = "vectors") -> np.ndarray:
    """Vectors: a 2-d (n, dim) array of finite components."""
    arr = _as_float32(values, what)
    if arr.ndim != 2:
        hint = " (one vector: pass [vector] or vector[None, :])" if arr.ndim == 1 else ""
        raise invalid(f"{what}: expected a 2-d array of shape (n, {dim}); got shape "
                      f"{tuple(arr.shape)}{hint}")
    if arr.shape[1] != dim:
        raise invalid(f"{what}: wrong dimension: the collection has dim {dim}; got shape "
                      f"{tuple(arr.shape)}", stale_shape=True)
    _check_values(arr, what, dtype)
    return arr


def ids_array(ids: Any, n: Optional[int] = None, what: str = "ids") -> List[int]:
    """Point ids as Python ints (uint64), `n` of them when given."""
    if isinstance(ids, (int, np.integer)) and not isinstance(ids, bool):
        ids = [ids]
    try:
        arr = np.asarray(ids)
    except (ValueError, TypeError) as e:
        raise invalid(f"{what}: not a list of integers ({e})") from None
    if arr.ndim != 1:
        raise invalid(f"{what}: expected a 1-d list of integers; got shape {tuple(arr.shape)}")
    if arr.size and arr.dtype.kind not in "iu":
        if arr.dtype == object and all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
            out = [int(x) for x in ids]
        else:
            raise invalid(f"{what}: expected integers; got dtype {arr.dtype}")
    else:
        out = [int(x) for x in arr.tolist()]
    if n is not None and len(out) != n:
        raise invalid(f"{what}: {len(out)} ids for {n} vectors")
    for x in out:
        if x < 0 or x > _UINT64_MAX:
            raise invalid(f"{what}: {x} is not a uint64 id (0..2^64-1)")
    return out


# ---- Payloads -------------------------------------------------------------------------------

def _scalar_value(x: Any, where: str, out: zoom_pb2.Value) -> None:
    if x is None:
        out.null_value = zoom_pb2.NULL_VALUE
    elif isinstance(x, (bool, np.bool_)):
        out.bool_value = bool(x)
    elif isinstance(x, (int, np.integer)):
        v = int(x)
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise invalid(f"payload {where}: {v} does not fit an int64")
        out.integer_value = v
    elif isinstance(x, (float, np.floating)):
        v = float(x)
        if not math.isfinite(v):
            raise invalid(f"payload {where}: {v} is not finite")
        out.double_value = v
    elif isinstance(x, str):
        out.string_value = x
    elif isinstance(x, GeoPoint):
        out.geo_value.lat, out.geo_value.lon = float(x.lat), float(x.lon)
    elif isinstance(x, Mapping) and set(x.keys()) == {"lat", "lon"}:
        out.geo_value.lat, out.geo_value.lon = float(x["lat"]), float(x["lon"])
    elif isinstance(x, (bytes, bytearray)):
        raise invalid(f"payload {where}: bytes are not a typed value; pass opaque bytes as "
                      "raw_payloads")
    elif isinstance(x, Mapping):
        raise invalid(f"payload {where}: nested objects are not supported (only a geo point "
                      "{'lat': .., 'lon': ..}); flatten the field names, e.g. 'a.b'")
    else:
        raise invalid(f"payload {where}: unsupported type {type(x).__name__}; use str, int, "
                      "float, bool, None, a geo point or a list of those")


def to_value(x: Any, where: str, out: zoom_pb2.Value) -> None:
    """Fills `out` with the Value of a payload field."""
    if isinstance(x, (list, tuple, np.ndarray)):
        items = x.tolist() if isinstance(x, np.ndarray) else x
        lv = out.list_value
        lv.SetInParent()
        if len(items) > 1024:
            raise invalid(f"payload {where}: a list of {len(items)} values; at most 1024")
        for i, e in enumerate(items):
            if isinstance(e, (list, tuple, np.ndarray)):
                raise invalid(f"payload {where}[{i}]: lists of lists are not supported")
            if e is None:
                raise invalid(f"payload {where}[{i}]: null inside a list; leave it out")
            _scalar_value(e, f"{where}[{i}]", lv.values.add())
    else:
        _scalar_value(x, where, out)


def fill_fields(payload: Optional[Mapping[str, Any]], fields: Any) -> None:
    """Fills a proto map<string, Value> from a payload dict."""
    if payload is None:
        return
    if not isinstance(payload, Mapping):
        raise invalid(f"payload: expected a dict of field -> value; got {type(payload).__name__}")
    for k, v in payload.items():
        if not isinstance(k, str) or not k or len(k.encode()) > 256 or "\0" in k:
            raise invalid(f"payload: field names are 1..256 bytes without NUL; got {k[:64]!r}"
                          if isinstance(k, str) else
                          f"payload: field names are strings; got {type(k).__name__}")
        to_value(v, repr(k), fields[k])


def from_value(v: zoom_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "list_value":
        return [from_value(e) for e in v.list_value.values]
    if kind == "geo_value":
        return {"lat": v.geo_value.lat, "lon": v.geo_value.lon}
    return getattr(v, kind)


def from_fields(fields: Any) -> Payload:
    return {k: from_value(v) for k, v in fields.items()}


# ---- Filters ----------------------------------------------------------------------------------
#
# A dict filter goes straight into protobuf's wire encoding, by hand, like
# the vectors (protobuf's json_format.ParseDict took 50-115 us a filter, on
# every search). It takes what ParseDict took: the snake_case names the docs
# use and protobuf's JSON (camelCase) names, None as a key left out, 64-bit
# integers also as decimal strings and numbers also as strings ("Infinity"),
# the forms protobuf's JSON printer writes. And besides: numpy scalars and
# 1-d arrays wherever a scalar or a list goes (checked like Python's ints,
# floats and bools), tuples as lists, zoomd.GeoPoint as a geo point. An
# error says where (must[0].match.value) and, for an unknown key, the
# snake_case keys expected there.
#
# The encoding: each field is its tag, (number << 3 | wire type), then a
# varint (wire type 0), a little-endian double (1) or a length and bytes (2:
# strings, messages, packed integers); the numbers are proto/zoom/v1/zoom.proto's
# (and google.protobuf.Value's). tests/test_filters.py checks the forms
# against ParseDict's.


def _keys(names: str) -> Dict[str, str]:
    """A level's keys -> their field names: each snake_case name (in the
    proto's field order) and its camelCase form (protobuf's JSON name)."""
    out = {n: n for n in names.split()}
    for n in names.split():
        head, *rest = n.split("_")
        out.setdefault(head + "".join(p.capitalize() for p in rest), n)
    return out


_FILTER_KEYS = _keys("must should must_not min_should")
_MIN_SHOULD_KEYS = _keys("conditions min_count")
_CONDITION_KEYS = _keys("key match range values_count geo_radius geo_bounding_box has_id "
                        "is_empty is_null filter")
_MATCH_KEYS = _keys("value any except keyword integer boolean integers except_integers")
_INTEGERS_KEYS = _keys("values")
_RANGE_KEYS = _keys("gt gte lt lte")
_GEO_RADIUS_KEYS = _keys("center radius")
_GEO_BOX_KEYS = _keys("top_left bottom_right")
_GEO_POINT_KEYS = _keys("lat lon")
_FIELD_KEY_KEYS = _keys("key")

# Tags. Filter: must 1, should 2, must_not 3 (Condition), min_should 4
# (MinShould: conditions 1, min_count 2). Condition: key 1, match 2, range 3,
# values_count 4, geo_radius 5 (center 1, radius 2), geo_bounding_box 6
# (top_left 1, bottom_right 2; GeoPoint: lat 1, lon 2), has_id 7 (packed
# uint64), is_empty 8, is_null 9 (FieldKey: key 1), filter 10. Match (a
# oneof): value 1 (google.protobuf.Value: number_value 2, string_value 3,
# bool_value 4), any 2, except 3 (ListValue: values 1), keyword 4, integer 5,
# boolean 6, integers 7, except_integers 8 (Integers: values 1, packed).
# Range: gt 1, gte 2, lt 3, lte 4 (optional doubles).
_FILTER_TAGS = {"must": b"\x0a", "should": b"\x12", "must_not": b"\x1a"}
_CONDITION_TAGS = {"key": b"\x0a", "match": b"\x12", "range": b"\x1a",
                   "values_count": b"\x22", "geo_radius": b"\x2a",
                   "geo_bounding_box": b"\x32", "is_empty": b"\x42", "is_null": b"\x4a",
                   "filter": b"\x52"}
_MATCH_TAGS = {"value": b"\x0a", "any": b"\x12", "except": b"\x1a", "keyword": b"\x22",
               "integers": b"\x3a", "except_integers": b"\x42"}
_RANGE_TAGS = {"gt": b"\x09", "gte": b"\x11", "lt": b"\x19", "lte": b"\x21"}

#: Nested filters the client follows (the server takes 8 levels and says so).
_MAX_FILTER_DEPTH = 64
#: A match value's integer travels as a JSON number (a double): exact to 2^53.
_VALUE_INT_MAX = 1 << 53
_DECIMAL = re.compile(r"-?[0-9]+")
_SMALL = [bytes((i,)) for i in range(128)]
_DOUBLE = struct.Struct("<d").pack


class _Bad(Exception):
    """A filter error on its way up: each level it passes adds its part of
    the path (innermost first), so that a filter without errors pays for no
    path."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: List[str] = []


def _desc(x: Any) -> str:
    return f"{type(x).__name__} {reprlib.repr(x)}"


def _names(keys: Dict[str, str]) -> str:
    return ", ".join(dict.fromkeys(keys.values()))


def _need_dict(d: Any, keys: Dict[str, str], what: str) -> None:
    """Raises unless `d` is a Mapping (callers test for a dict first)."""
    if not isinstance(d, abc.Mapping):
        raise _Bad(f"expected {what} as a dict (of {_names(keys)}); got {_desc(d)}")


def _field_name(d: Mapping[str, Any], key: Any, keys: Dict[str, str], what: str) -> str:
    """The field of a key that is not a snake_case name: a camelCase one's,
    else _Bad naming the keys expected (an unknown key)."""
    name = keys.get(key)
    if name is None:
        hint = ""
        if keys is _FILTER_KEYS and key in _CONDITION_KEYS:
            hint = " (a condition goes in a list: {'must': [{'key': ..., 'match': ...}]})"
        elif isinstance(key, str):
            close = difflib.get_close_matches(key, list(keys), n=1, cutoff=0.65)
            if close:
                hint = f" (did you mean {keys[close[0]]!r}?)"
        raise _Bad(f"unknown key {key!r} in {what}{hint}; expected one of: {_names(keys)}")
    if name in d:
        raise _Bad(f"both {name!r} and {key!r} given (the same field)")
    return name


def _ld(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field."""
    n = len(body)
    return tag + (_SMALL[n] if n < 128 else varint(n)) + body


def _list(v: Any) -> Sequence[Any]:
    """A list, a tuple or a 1-d numpy array (as a list of Python scalars)."""
    if type(v) is list or isinstance(v, (list, tuple)):
        return v
    if isinstance(v, np.ndarray):
        if v.ndim != 1:
            raise _Bad(f"expected a list or a 1-d array; got an array of shape "
                       f"{tuple(v.shape)}")
        return v.tolist()
    raise _Bad(f"expected a list; got {_desc(v)}")


def _utf8(x: Any) -> bytes:
    """A string field's bytes."""
    if not isinstance(x, str):
        raise _Bad(f"expected a string; got {_desc(x)}")
    try:
        return x.encode()
    except UnicodeEncodeError as e:
        raise _Bad(f"{_desc(x)} is not valid UTF-8 ({e.reason})") from None


def _integer(x: Any, lo: int, hi: int, kind: str) -> int:
    """An integer: an int (Python or numpy), a float without a fraction or a
    decimal string (protobuf's JSON form of 64-bit integers), in lo..hi."""
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, int) and not isinstance(x, bool):
        v = x
    elif isinstance(x, float) and x.is_integer():
        v = int(x)
    elif isinstance(x, str) and _DECIMAL.fullmatch(x):
        v = int(x)
    else:
        raise _Bad(f"expected an integer; got {_desc(x)}")
    if not lo <= v <= hi:
        raise _Bad(f"{v} {kind}")
    return v


def _integers(v: Any, lo: int, hi: int, kind: str) -> Sequence[int]:
    """Integers in lo..hi: a list, a tuple or a 1-d numpy array."""
    if isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "iu":
        if v.size == 0 or (lo <= int(v.min()) and int(v.max()) <= hi):
            return v.tolist()
    v = _list(v)
    # Plain ints (the common case) are checked at once; anything else, or an
    # int out of range, one by one (which says which).
    if all(type(x) is int for x in v) and (not v or (lo <= min(v) and max(v) <= hi)):
        return v
    out = []
    for i, x in enumerate(v):
        try:
            out.append(_integer(x, lo, hi, kind))
        except _Bad as e:
            e.path.append(f"[{i}]")
            raise
    return out


def _number(x: Any) -> float:
    """A double: an int or a float (Python or numpy) or a string ("1.5",
    "Infinity": protobuf's JSON form); not NaN."""
    t = type(x)
    if t is float or t is int:
        v = float(x)
    else:
        if isinstance(x, np.generic):
            x = x.item()
        if isinstance(x, bool) or not isinstance(x, (int, float, str)):
            raise _Bad(f"expected a number; got {_desc(x)}")
        try:
            v = float(x)
        except (OverflowError, ValueError):
            raise _Bad(f"expected a number; got {_desc(x)}") from None
    if v != v:
        raise _Bad("NaN is not a number to compare with")
    return v


def _boolean(x: Any) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise _Bad(f"expected True or False; got {_desc(x)}")
    return bool(x)


def _match_value(x: Any) -> bytes:
    """A match operand, as a google.protobuf.Value: a string, a bool, an
    integer (|n| <= 2^53: it travels as a double) or a float (the server
    takes one without a fraction)."""
    t = type(x)
    if t is str:
        return _ld(b"\x1a", _utf8(x))
    if t is float:
        return b"\x11" + _DOUBLE(x)
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, str):
        return _ld(b"\x1a", _utf8(x))
    if isinstance(x, bool):
        return b"\x20\x01" if x else b"\x20\x00"
    if isinstance(x, int):
        if not -_VALUE_INT_MAX <= x <= _VALUE_INT_MAX:
            raise _Bad(f"{x} is beyond 2^53 in magnitude, where a match value (a JSON number) "
                       "stops being exact; use {'integer': n} (a list: {'integers': "
                       "{'values': [...]}} or 'except_integers'): exact for any int64")
        return b"\x11" + _DOUBLE(x)
    if isinstance(x, float):
        return b"\x11" + _DOUBLE(x)
    hint = (" (is_null / is_empty test for a null or missing field)" if x is None else
            " (several values: use 'any')" if isinstance(x, (list, tuple, np.ndarray)) else "")
    raise _Bad(f"a match takes a string, an integer or a bool; got {_desc(x)}{hint}")


def _match_values(v: Any) -> bytes:
    """A match's any / except: a ListValue of operands."""
    out = []
    for i, x in enumerate(_list(v)):
        try:
            out.append(_ld(b"\x0a", _match_value(x)))
        except _Bad as e:
            e.path.append(f"[{i}]")
            raise
    return b"".join(out)


def _match_integers(d: Any, what: str) -> bytes:
    """A match's integers / except_integers: {"values": [...]}."""
    if type(d) is not dict:
        _need_dict(d, _INTEGERS_KEYS, what)
    out = b""
    for k, v in d.items():
        name = _INTEGERS_KEYS.get(k)
        if name != k:
            name = _field_name(d, k, _INTEGERS_KEYS, what)
        if v is None:
            continue
        try:
            ints = _integers(v, _INT64_MIN, _INT64_MAX, "does not fit an int64")
        except _Bad as e:
            e.path.append(".values")
            raise
        out = zoom_pb2.Integers(values=ints).SerializeToString()
    return out


def _match(d: Any) -> bytes:
    if type(d) is not dict:
        _need_dict(d, _MATCH_KEYS, "a match")
    found: Optional[Tuple[str, Any]] = None
    for k, v in d.items():
        name = _MATCH_KEYS.get(k)
        if name != k:
            name = _field_name(d, k, _MATCH_KEYS, "a match")
        if v is None and name != "value":  # (a null value is refused below)
            continue
        if found is not None:
            raise _Bad(f"a match takes one of {_names(_MATCH_KEYS)}; this one sets "
                       f"{found[0]!r} and {name!r}")
        found = (name, v)
    if found is None:
        return b""  # an empty match: the server says what it lacks
    name, v = found
    try:
        if name == "value":
            body = _match_value(v)
        elif name == "any" or name == "except":
            body = _match_values(v)
        elif name == "keyword":
            body = _utf8(v)
        elif name == "integer":
            return b"\x28" + varint(_integer(v, _INT64_MIN, _INT64_MAX, "does not fit an int64")
                                    & _UINT64_MAX)
        elif name == "boolean":
            return b"\x30\x01" if _boolean(v) else b"\x30\x00"
        else:
            body = _match_integers(v, name)
    except _Bad as e:
        e.path.append("." + name)
        raise
    return _ld(_MATCH_TAGS[name], body)


def _doubles(d: Any, keys: Dict[str, str], tags: Dict[str, bytes], what: str) -> bytes:
    """A message of double fields (a range, a geo point)."""
    if type(d) is not dict:
        _need_dict(d, keys, what)
    out = b""
    for k, v in d.items():
        name = keys.get(k)
        if name != k:
            name = _field_name(d, k, keys, what)
        if v is None:
            continue
        try:
            out += tags[name] + _DOUBLE(_number(v))
        except _Bad as e:
            e.path.append("." + name)
            raise
    return out


_GEO_POINT_TAGS = {"lat": b"\x09", "lon": b"\x11"}


def _geo_point(p: Any) -> bytes:
    if isinstance(p, GeoPoint):
        p = {"lat": p.lat, "lon": p.lon}
    return _doubles(p, _GEO_POINT_KEYS, _GEO_POINT_TAGS, "a geo point")


def _geo(d: Any, keys: Dict[str, str], what: str) -> bytes:
    """geo_radius {center, radius} or geo_bounding_box {top_left, bottom_right}."""
    if type(d) is not dict:
        _need_dict(d, keys, what)
    out = b""
    for k, v in d.items():
        name = keys.get(k)
        if name != k:
            name = _field_name(d, k, keys, what)
        if v is None:
            continue
        try:
            if name == "radius":
                out += b"\x11" + _DOUBLE(_number(v))
            else:
                out += _ld(b"\x12" if name == "bottom_right" else b"\x0a", _geo_point(v))
        except _Bad as e:
            e.path.append("." + name)
            raise
    return out


def _field_key(d: Any, what: str) -> bytes:
    """is_empty / is_null: {"key": field}."""
    if type(d) is not dict:
        _need_dict(d, _FIELD_KEY_KEYS, what)
    out = b""
    for k, v in d.items():
        if _FIELD_KEY_KEYS.get(k) != k:
            _field_name(d, k, _FIELD_KEY_KEYS, what)
        if v is None:
            continue
        try:
            out = _ld(b"\x0a", _utf8(v))
        except _Bad as e:
            e.path.append(".key")
            raise
    return out


def _condition(d: Any, depth: int) -> bytes:
    if type(d) is not dict:
        _need_dict(d, _CONDITION_KEYS, "a condition")
    out = b""
    for k, v in d.items():
        name = _CONDITION_KEYS.get(k)
        if name != k:
            name = _field_name(d, k, _CONDITION_KEYS, "a condition")
        if v is None:
            continue
        try:
            if name == "key":
                body = _utf8(v)
            elif name == "match":
                body = _match(v)
            elif name == "range" or name == "values_count":
                body = _doubles(v, _RANGE_KEYS, _RANGE_TAGS, "a range")
            elif name == "has_id":
                ids = _integers(v, 0, _UINT64_MAX, "is not a uint64 id (0..2^64-1)")
                out += zoom_pb2.Condition(has_id=ids).SerializeToString()  # field 7, packed
                continue
            elif name == "is_empty" or name == "is_null":
                body = _field_key(v, name)
            elif name == "geo_radius":
                body = _geo(v, _GEO_RADIUS_KEYS, name)
            elif name == "geo_bounding_box":
                body = _geo(v, _GEO_BOX_KEYS, name)
            else:
                body = _filter(v, depth + 1)
        except _Bad as e:
            e.path.append("." + name)
            raise
        out += _ld(_CONDITION_TAGS[name], body)
    return out


def _conditions(tag: bytes, v: Any, depth: int) -> bytes:
    """A repeated Condition field."""
    if type(v) is not list and not isinstance(v, (list, tuple)):
        raise _Bad(f"expected a list of conditions; got {_desc(v)}")
    out = []
    for i, c in enumerate(v):
        try:
            out.append(_ld(tag, _condition(c, depth)))
        except _Bad as e:
            e.path.append(f"[{i}]")
            raise
    return b"".join(out)


def _min_should(d: Any, depth: int) -> bytes:
    if type(d) is not dict:
        _need_dict(d, _MIN_SHOULD_KEYS, "min_should")
    out = b""
    for k, v in d.items():
        name = _MIN_SHOULD_KEYS.get(k)
        if name != k:
            name = _field_name(d, k, _MIN_SHOULD_KEYS, "min_should")
        if v is None:
            continue
        try:
            if name == "conditions":
                out += _conditions(b"\x0a", v, depth)
            else:
                out += b"\x10" + varint(_integer(v, 0, _UINT64_MAX, "is not a uint64"))
        except _Bad as e:
            e.path.append("." + name)
            raise
    return out


def _filter(d: Any, depth: int) -> bytes:
    if depth > _MAX_FILTER_DEPTH:
        raise _Bad(f"nested more than {_MAX_FILTER_DEPTH} levels deep (the server takes 8)")
    if type(d) is not dict:
        _need_dict(d, _FILTER_KEYS, "a filter")
    out = b""
    for k, v in d.items():
        name = _FILTER_KEYS.get(k)
        if name != k:
            name = _field_name(d, k, _FILTER_KEYS, "a filter")
        if v is None:
            continue
        try:
            if name == "min_should":
                out += _ld(b"\x22", _min_should(v, depth))
            else:
                out += _conditions(_FILTER_TAGS[name], v, depth)
        except _Bad as e:
            e.path.append("." + name)
            raise
    return out


def filter_bytes(f: FilterLike) -> Optional[bytes]:
    """The encoding of the zoom.v1.Filter `f` stands for (see to_filter);
    None for None."""
    if f is None:
        return None
    if isinstance(f, zoom_pb2.Filter):
        return f.SerializeToString()
    if not isinstance(f, abc.Mapping):
        raise invalid(f"filter: expected a dict in Qdrant's shape or a zoom_pb2.Filter; got "
                      f"{type(f).__name__}")
    try:
        return _filter(f, 0)
    except _Bad as e:
        path = "".join(reversed(e.path)).lstrip(".")
        raise invalid(f"filter: {path}: {e.message}" if path else f"filter: {e.message}") \
            from None


def fill_filter(f: FilterLike, out: zoom_pb2.Filter) -> None:
    """Sets a request's filter field `out` to `f`'s filter (see to_filter);
    leaves it unset for None."""
    data = filter_bytes(f)
    if data is not None:
        out.SetInParent()
        out.MergeFromString(data)


def to_filter(f: FilterLike) -> Optional[zoom_pb2.Filter]:
    """A Filter proto from Qdrant's shape (a dict: the JSON form of
    zoom.v1.Filter, as zoomctl takes it; numpy scalars and 1-d arrays go
    where numbers and lists do) or a Filter proto (as it is); None for None.
    A key the filter language does not have, or a value of the wrong type,
    is a client-side InvalidArgument saying where, and for a key the keys
    expected there."""
    if f is None or isinstance(f, zoom_pb2.Filter):
        return f
    return zoom_pb2.Filter.FromString(filter_bytes(f))


# ---- Requests ---------------------------------------------------------------------------------

def knobs_proto(ef: Optional[int], nprobe: Optional[int], rerank: Optional[int],
                out: zoom_pb2.SearchKnobs) -> None:
    for name, value, field_name in (("ef", ef, "ef"), ("nprobe", nprobe, "nprobe"),
                                    ("rerank", rerank, "rerank_candidates")):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise invalid(f"{name}: expected a non-negative integer; got {value!r}")
        if value > 0xFFFFFFFF:
            raise invalid(f"{name}: {value} is too large")
        setattr(out, field_name, int(value))


def target_recall_of(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not 0 <= float(value) <= 1:
        raise invalid(f"target_recall: expected a number in (0, 1] (0: the default); got "
                      f"{value!r}")
    return float(value)


def search_template(collection: str, k: int, ef: Optional[int], nprobe: Optional[int],
                    rerank: Optional[int], preview_only: bool, exact: bool, with_payload: bool,
                    with_vectors: bool, allow_partial: bool, filter: FilterLike,
                    rerank_stop_sd: Optional[float] = None,
                    target_recall: Optional[float] = None,
                    min_coverage: Optional[float] = None, after: Any = None,
                    band_confidence: Optional[float] = None,
                    exact_scores: bool = False) -> bytes:
    """A SearchRequest without its vector, serialized (the vector is appended
    per query: protobuf merges concatenated fields)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise invalid(f"k: expected a positive integer; got {k!r}")
    if k > 0xFFFFFFFF:
        raise invalid(f"k: {k} is too large")
    req = zoom_pb2.SearchRequest(collection=collection, k=int(k), preview_only=preview_only,
                                 exact=exact, with_payload=with_payload,
                                 with_vectors=with_vectors, allow_partial=allow_partial,
                                 exact_scores=exact_scores)
    knobs_proto(ef, nprobe, rerank, req.knobs)
    if rerank_stop_sd is not None:
        if isinstance(rerank_stop_sd, bool) or not isinstance(
                rerank_stop_sd, (int, float, np.integer, np.floating)) or \
                not 0 <= float(rerank_stop_sd) <= 100:
            raise invalid(f"rerank_stop_sd: expected a number in [0, 100]; got "
                          f"{rerank_stop_sd!r}")
        req.knobs.rerank_stop_sd = float(rerank_stop_sd)
    if band_confidence is not None:
        if isinstance(band_confidence, bool) or not isinstance(
                band_confidence, (int, float, np.integer, np.floating)) or \
                not 0 <= float(band_confidence) <= 100:
            raise invalid(f"band_confidence: expected a number in [0, 100]; got "
                          f"{band_confidence!r}")
        req.knobs.band_confidence = float(band_confidence)
    if target_recall is not None:
        req.knobs.target_recall = target_recall_of(target_recall)
    if min_coverage is not None:
        if isinstance(min_coverage, bool) or not isinstance(
                min_coverage, (int, float, np.integer, np.floating)) or \
                not 0 <= float(min_coverage) <= 1:
            raise invalid(f"min_coverage: expected a number in [0, 1]; got {min_coverage!r}")
        req.min_coverage = float(min_coverage)
    if after is not None:
        req.consistency = zoom_pb2.SESSION
        req.after.extend(tokens_of(after))
    head = req.SerializeToString()
    flt = filter_bytes(filter)
    if flt is not None:  # SearchRequest.filter, field 10
        head += _ld(b"\x52", flt)
    return head


def points_message(collection: str, ids: Sequence[int], vectors: np.ndarray,
                   payloads: Optional[Sequence[Optional[Mapping[str, Any]]]],
                   raw_payloads: Optional[Sequence[Optional[bytes]]],
                   dtype: str = "float32") -> bytes:
    """An UpsertRequest / ImportRequest (same fields) of these points. For a
    uint8 collection the vectors go as Point.vector_bytes (field 5, one byte
    a dimension; matrix_2d checked them: integers 0..255), else as floats."""
    n = len(ids)
    if payloads is not None and len(payloads) != n:
        raise invalid(f"payloads: {len(payloads)} payloads for {n} vectors")
    if raw_payloads is not None and len(raw_payloads) != n:
        raise invalid(f"raw_payloads: {len(raw_payloads)} for {n} vectors")
    parts = [field_bytes(1, collection.encode())] if collection else []
    if dtype == "uint8":
        stride = vectors.shape[1]
        vec_head = varint(5 << 3 | 2) + varint(stride)
        raw_rows = vectors.astype(np.uint8).tobytes()
    else:
        stride = vectors.shape[1] * 4
        vec_head = varint(2 << 3 | 2) + varint(stride)
        raw_rows = vectors.tobytes()
    for i in range(n):
        pid = ids[i]
        body = (b"\x08" + varint(pid) if pid else b"") + vec_head + \
            raw_rows[i * stride:(i + 1) * stride]
        p = payloads[i] if payloads is not None else None
        r = raw_payloads[i] if raw_payloads is not None else None
        if p is not None or r:
            extra = zoom_pb2.Point()
            if r:
                if not isinstance(r, (bytes, bytearray)):
                    raise invalid(f"raw_payloads[{i}]: expected bytes; got {type(r).__name__}")
                extra.payload = bytes(r)
            fill_fields(p, extra.fields)
            body += extra.SerializeToString()
        parts.append(b"\x12" + varint(len(body)) + body)
    return b"".join(parts)


# ---- Responses -------------------------------------------------------------------------------

def stats_of(s: zoom_pb2.QueryStats) -> QueryStats:
    return QueryStats(
        preview_us=s.preview_us, fullview_us=s.fullview_us, rerank_us=s.rerank_us,
        ssd_reads=s.ssd_reads, bytes_read=s.bytes_read, candidates=s.candidates,
        distance_evals=s.distance_evals, cache_hits=s.cache_hits, degraded=s.degraded,
        exact=s.exact, filter_strategy=s.filter_strategy, filter_matches=s.filter_matches,
        filter_expansions=s.filter_expansions, filter_scan=s.filter_scan, warning=s.warning,
        fullview_rounds=s.fullview_rounds, target_recall=s.target_recall,
        calibrated_recall=s.calibrated_recall, target_reached=s.target_reached,
        certain_in=s.certain_in, certain_out=s.certain_out,
        knobs=SearchKnobs(ef=s.knobs.ef, nprobe=s.knobs.nprobe,
                          rerank=s.knobs.rerank_candidates) if s.HasField("knobs") else None)


def search_result(resp: zoom_pb2.SearchResponse, with_payload: bool,
                  with_vectors: bool) -> SearchResult:
    hits = []
    for h in resp.hits:
        hits.append(ScoredPoint(
            id=h.id, score=h.score,
            payload=from_fields(h.fields) if with_payload else None,
            vector=np.array(h.vector, dtype=np.float32) if with_vectors else None,
            raw_payload=h.payload, estimated=h.estimated))
    return SearchResult(hits, stats_of(resp.stats),
                        coverage=resp.coverage if resp.coverage > 0 else 1.0,
                        degraded=resp.degraded)


def record_of(p: zoom_pb2.Point, with_payload: bool, with_vectors: bool) -> Record:
    return Record(id=p.id,
                  vector=np.array(p.vector, dtype=np.float32) if with_vectors else None,
                  payload=from_fields(p.fields) if with_payload else None,
                  raw_payload=p.payload)


def collection_info(i: zoom_pb2.CollectionInfo) -> CollectionInfo:
    s = i.spec
    return CollectionInfo(
        name=s.name, dim=s.dim, metric=_METRIC_NAMES.get(s.metric, str(s.metric)),
        dtype=_DTYPE_NAMES.get(s.dtype, str(s.dtype)),
        index=IndexSpec(kind=_KIND_NAMES.get(s.index.kind, str(s.index.kind)), m=s.index.m,
                        ef_construction=s.index.ef_construction, pq_m=s.index.pq_m,
                        pq_nbits=s.index.pq_nbits, nlist=s.index.nlist, opq=s.index.opq,
                        compact_links=s.index.compact_links,
                        quantizer=_QUANTIZER_NAMES.get(s.index.quantizer,
                                                       str(s.index.quantizer))),
        default_knobs=SearchKnobs(ef=s.default_knobs.ef, nprobe=s.default_knobs.nprobe,
                                  rerank=s.default_knobs.rerank_candidates,
                                  target_recall=s.default_knobs.target_recall),
        points=i.points, deleted_points=i.deleted_points, stored_records=i.stored_records,
        index_state=zoom_pb2.IndexState.Name(i.index_state).lower(),
        indexed_points=i.indexed_points, resident_bytes=i.resident_bytes,
        disk_bytes=i.disk_bytes, build_progress=i.build_progress, index_error=i.index_error,
        compaction_error=i.compaction_error,
        field_indexes=[FieldIndexInfo(field=f.field,
                                      type=_FIELD_TYPE_NAMES.get(f.type, str(f.type)),
                                      ready=f.ready, points=f.points, bytes=f.bytes)
                       for f in i.field_indexes],
        trained_points=i.trained_points, auto_retrains=i.auto_retrains,
        code_error_ratio=i.code_error_ratio, drift_retrains=i.drift_retrains,
        cache_bytes=s.cache_bytes, shards=s.shards, replicas=s.replicas,
        calibration=Calibration(
            k=i.calibration.k, queries=i.calibration.queries,
            indexed_points=i.calibration.indexed_points,
            created_unix_ms=i.calibration.created_unix_ms,
            points=[CalibrationPoint(ef=p.ef, nprobe=p.nprobe, rerank=p.rerank_candidates,
                                     recall=p.recall, recall_lower=p.recall_lower,
                                     mean_us=p.mean_us, ssd_reads=p.ssd_reads,
                                     work=p.work, band_confidence=p.band_confidence,
                                     certain_in=p.certain_in)
                    for p in i.calibration.points]) if i.HasField("calibration") else None,
        calibration_current=i.calibration_current, calibration_error=i.calibration_error,
        default_target_recall=i.default_target_recall)


def collection_spec(name: str, dim: int, metric: str, dtype: str, index: Optional[IndexSpec],
                    default_knobs: Union[None, SearchKnobs, Mapping[str, int]],
                    cache_bytes: Optional[int] = None, shards: Optional[int] = None,
                    replicas: Optional[int] = None) -> zoom_pb2.CollectionSpec:
    if not isinstance(name, str) or not name:
        raise invalid("name: a collection name is 1..64 characters of [A-Za-z0-9_-]")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise invalid(f"dim: expected a positive integer; got {dim!r}")
    spec = zoom_pb2.CollectionSpec(name=name, dim=int(dim),
                                   metric=_choice("metric", metric, _METRICS),
                                   dtype=_choice("dtype", dtype, _DTYPES))
    if index is not None:
        if not isinstance(index, IndexSpec):
            raise invalid(f"index: expected a zoomd.IndexSpec; got {type(index).__name__}")
        spec.index.kind = _choice("index kind", index.kind, _KINDS)
        for f in ("m", "ef_construction", "pq_m", "pq_nbits", "nlist"):
            setattr(spec.index, f, int(getattr(index, f)))
        spec.index.opq = bool(index.opq)
        spec.index.compact_links = bool(index.compact_links)
        spec.index.quantizer = _choice("quantizer", index.quantizer, _QUANTIZERS)
    if default_knobs is not None:
        k = default_knobs if isinstance(default_knobs, SearchKnobs) else SearchKnobs(**default_knobs)
        knobs_proto(k.ef, k.nprobe, k.rerank, spec.default_knobs)
        if k.target_recall:
            spec.default_knobs.target_recall = target_recall_of(k.target_recall)
    if cache_bytes is not None:
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, (int, np.integer)) or \
                not 0 <= cache_bytes < 2**64:
            raise invalid(f"cache_bytes: expected a non-negative integer; got {cache_bytes!r}")
        spec.cache_bytes = int(cache_bytes)
    for what, v in (("shards", shards), ("replicas", replicas)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < 2**32:
            raise invalid(f"{what}: expected a non-negative integer; got {v!r}")
        setattr(spec, what, int(v))
    return spec


def tokens_of(after: Any) -> List[zoom_pb2.WriteToken]:
    """WriteTokens (or (shard, sequence) pairs) as protos."""
    out = []
    for t in after:
        shard, seq = (t.shard, t.sequence) if isinstance(t, (WriteToken, zoom_pb2.WriteToken)) \
            else t
        out.append(zoom_pb2.WriteToken(shard=int(shard), sequence=int(seq)))
    return out


def merge_tokens(into: Optional[List[WriteToken]], got: Any) -> None:
    """Adds a response's tokens to `into`, one a shard (the highest
    sequence, with the replicas that acknowledged it; the same sequence
    twice: the union of its acknowledged_by, in the order first seen)."""
    if into is None:
        return
    best: Dict[int, Tuple[int, Tuple[str, ...]]] = {}
    for t in list(into) + list(got):
        seq = int(t.sequence)
        acks = tuple(getattr(t, "acknowledged_by", ()))
        have = best.get(int(t.shard))
        if have is None or seq > have[0]:
            best[int(t.shard)] = (seq, acks)
        elif seq == have[0]:
            best[int(t.shard)] = (seq, have[1] + tuple(a for a in acks if a not in have[1]))
    into[:] = [WriteToken(shard=k, sequence=v, acknowledged_by=a)
               for k, (v, a) in sorted(best.items())]


# ---- Write concerns ----------------------------------------------------------------------

_CONCERNS = {"log": zoom_pb2.WRITE_CONCERN_LOG, "majority": zoom_pb2.WRITE_CONCERN_MAJORITY,
             "all": zoom_pb2.WRITE_CONCERN_ALL}
# A server never answers DEFAULT (it reports what it met); DEFAULT means MAJORITY.
_CONCERN_NAMES = {zoom_pb2.WRITE_CONCERN_DEFAULT: "majority",
                  **{v: k for k, v in _CONCERNS.items()}}


def write_concern(value: Any) -> int:
    """A write's `write_concern=` as the zoom.v1.WriteConcern number: None
    (the server's default, majority), "log" / "majority" / "all" (any case)
    or a zoom_pb2.WRITE_CONCERN_* value."""
    if value is None:
        return zoom_pb2.WRITE_CONCERN_DEFAULT
    if isinstance(value, str) and value.lower() in _CONCERNS:
        return _CONCERNS[value.lower()]
    if not isinstance(value, (bool, str)) and isinstance(value, (int, np.integer)) and \
            int(value) in _CONCERN_NAMES:
        return int(value)
    raise invalid(f"write_concern: expected None (the server's default, majority), 'log', "
                  f"'majority', 'all' or a zoom_pb2.WRITE_CONCERN_* value (0-3); got "
                  f"{value!r}")


def concern_name(value: int) -> str:
    """A response's WriteConcern as "log", "majority" or "all" (DEFAULT,
    which a server does not answer, as "majority", what it stands for)."""
    name = _CONCERN_NAMES.get(value)
    if name is not None:
        return name
    try:  # a concern newer than this client: its proto name
        return zoom_pb2.WriteConcern.Name(value).lower().replace("write_concern_", "")
    except ValueError:
        return str(value)


def field_type(t: str) -> int:
    return _choice("field index type", t, _FIELD_TYPES)


def model_info(m: decoder_pb2.ModelInfo) -> ModelInfo:
    return ModelInfo(name=m.name, dir=m.dir, vocab_size=m.vocab_size, dim=m.dim,
                     graph_bytes=m.graph_bytes, resident_bytes=m.resident_bytes,
                     state=decoder_pb2.ModelState.Name(m.state).lower(), progress=m.progress,
                     error=m.error, m=m.m, ef_construction=m.ef_construction,
                     graph_from_cache=m.graph_from_cache, default_ef=m.default_ef,
                     default_ef_source=m.default_ef_source or "builtin",
                     calibration_contexts=m.calibration_contexts,
                     calibration_p1=m.calibration_p1, calibration_p5=m.calibration_p5,
                     calibration_error=m.calibration_error, error_code=m.error_code)


def server_info(r: zoom_pb2.GetServerInfoResponse) -> ServerInfo:
    return ServerInfo(version=r.version, simd_level=r.simd_level,
                      started_unix_ms=r.started_unix_ms)


def contexts_2d(contexts: Any, what: str = "contexts") -> np.ndarray:
    arr = _as_float32(contexts, what)
    if arr.ndim != 2:
        hint = " (one context: pass [h] or h[None, :])" if arr.ndim == 1 else ""
        raise invalid(f"{what}: expected a 2-d array (n, d); got shape {tuple(arr.shape)}{hint}")
    _check_values(arr, what, "float32")
    return arr


def context_1d(h: Any, what: str = "context") -> np.ndarray:
    arr = _as_float32(h, what)
    if arr.ndim != 1:
        raise invalid(f"{what}: expected a 1-d array of d floats; got shape {tuple(arr.shape)}")
    _check_values(arr, what, "float32")
    return arr


_TAILS = {None: 0, "clusters": 1, "sample": 2, "none": 3}


def topk_request(model: str, contexts: Iterable[np.ndarray], k: int, ef: int, return_words: bool,
                 return_probs: bool, exact: bool, tail_samples: int,
                 tail: Optional[str] = None) -> bytes:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise invalid(f"k: expected a positive integer; got {k!r}")
    if tail not in _TAILS:
        raise invalid(f"tail: expected 'clusters', 'sample', 'none' or None; got {tail!r}")
    head = decoder_pb2.TopKRequest(model=model, k=int(k), ef=int(ef or 0),
                                   return_words=return_words, return_probs=return_probs,
                                   exact=exact, tail_samples=int(tail_samples or 0),
                                   tail=_TAILS[tail]).SerializeToString()
    parts = [head]
    for row in contexts:
        ctx = packed_floats(1, row)
        parts.append(b"\x12" + varint(len(ctx)) + ctx)
    return b"".join(parts)


def health_request(service: str) -> bytes:
    return field_bytes(1, service.encode()) if service else b""


_HEALTH = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def health_status(data: bytes) -> str:
    """grpc.health.v1.HealthCheckResponse's status (field 1, a varint)."""
    status, i = 0, 0
    while i < len(data):
        tag = data[i]
        i += 1
        if tag != 0x08:
            break
        shift = 0
        status = 0
        while i < len(data):
            b = data[i]
            i += 1
            status |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
    return _HEALTH.get(status, str(status))


def split(n: int, batch: int) -> List[Tuple[int, int]]:
    return [(i, min(n, i + batch)) for i in range(0, n, batch)]
