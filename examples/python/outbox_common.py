"""Helpers shared by the Python emit examples (docs/emit-contract.md): event ids and the events
the examples write. Standard library only."""

import json
import os
import time
import uuid


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (version 7) as outpost makes them; any UUID is accepted, but ids in
    time order keep the PostgreSQL id index compact."""
    ms = time.time_ns() // 1_000_000
    value = (ms & ((1 << 48) - 1)) << 80 | int.from_bytes(os.urandom(10), "big")
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return uuid.UUID(int=value)


def now_us() -> int:
    """occurred_at: Unix time in microseconds."""
    return time.time_ns() // 1000


def report(event_id, type_, key, payload, headers, committed=True):
    """One JSON line per emitted event on stdout (tests/examples/run_example.py compares them
    with what `outpost relay` delivered)."""
    print(json.dumps({"id": str(event_id), "type": type_, "key": key,
                      "payload": json.loads(payload), "headers": headers,
                      "committed": committed}), flush=True)
