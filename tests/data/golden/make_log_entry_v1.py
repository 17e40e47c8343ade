#!/usr/bin/python3
"""Writes log_entry_v1_*.zlog: the cluster's log entries, encoding version 1,
and log_entry_v2_delete.zlog (version 2: a write version after the header),
from the description in server/cluster/log_entry.h (not from the C++ encoder:
tests/cluster/log_entry_test.cc checks that the encoder writes exactly these
bytes and decodes them back).

    tests/data/golden/make_log_entry_v1.py   # in tests/data/golden
"""
import os
import struct


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def u8(v): return struct.pack("<B", v)
def u16(v): return struct.pack("<H", v)
def u32(v): return struct.pack("<I", v)
def u64(v): return struct.pack("<Q", v)
def blob(b): return u32(len(b)) + b


def fields(items):
    """payload_fields.h version 1: "ZF" u8 1 u32 n, names ascending; here
    scalars only: ("s", str) -> type 1, ("i", int) -> type 2."""
    if not items:
        return b""
    out = b"ZF" + u8(1) + u32(len(items))
    for name, (kind, value) in sorted(items.items()):
        n = name.encode()
        out += u16(len(n)) + n + u8(1)  # kind 1: scalar
        if kind == "s":
            out += u8(1) + blob(value.encode())
        else:
            out += u8(2) + struct.pack("<q", value)
    return out


def entry(op, body, version=0):
    head = b"ZLOG" + u16(2 if version else 1) + u8(op) + u8(0)
    if version:
        head += u64(version)
    data = head + body
    return data + u32(crc32c(data))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    dim = 3
    points = [
        (7, [0.5, -1.25, 3.0], b"seven", {"tag": ("s", "red"), "year": ("i", 2018)}),
        (2**63 + 5, [0.0, 1.0, -0.0], b"", {}),
    ]
    body = u32(dim) + u32(len(points))
    for pid, vec, payload, f in points:
        body += u64(pid) + struct.pack("<3f", *vec) + blob(payload) + blob(fields(f))
    files = {
        "upsert": entry(1, body),
        "delete": entry(2, u32(3) + u64(1) + u64(2) + u64(2**64 - 1)),
        "set_payload": entry(3, u8(1) + u32(2) + u64(4) + u64(9) +
                             blob(fields({"tag": ("s", "blue")}))),
        "delete_payload": entry(4, u32(1) + u64(4) + u32(2) + blob(b"tag") + blob(b"year")),
        "create_field_index": entry(5, u8(1) + blob(b"year")),
        "delete_field_index": entry(6, blob(b"tag")),
    }
    for name, data in files.items():
        with open(os.path.join(here, "log_entry_v1_%s.zlog" % name), "wb") as f:
            f.write(data)
    with open(os.path.join(here, "log_entry_v2_delete.zlog"), "wb") as f:
        f.write(entry(2, u32(3) + u64(1) + u64(2) + u64(2**64 - 1), version=1765000000123456789))


if __name__ == "__main__":
    main()
