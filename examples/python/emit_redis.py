#!/usr/bin/env python3
"""Emit outpost events from Python with redis-py (Debian: python3-redis), in the same MULTI as
the business write (docs/emit-contract.md, "Redis").

    outpost schema --store 'redis://cache:6379/0?prefix=shop' > outpost_append.lua
    python3 emit_redis.py redis://cache:6379/0 --prefix shop --script outpost_append.lua
    outpost relay --store 'redis://cache:6379/0?prefix=shop' --sink ...

With --cluster the URL is one node of a Redis Cluster: the MULTI goes to the node that owns the
outbox's hash tag {prefix}, and the business keys carry that tag too.
"""

import argparse

import redis
import redis.cluster

from outbox_common import now_us, report, uuid7

SUPPORTED_LAYOUTS = {"3"}  # docs/emit-contract.md, "Versions"


def field(data: bytes) -> bytes:
    return str(len(data)).encode() + b":" + data


def pack_body(key: str, type_: str, occurred_us: int, headers: dict, payload: bytes) -> bytes:
    """The event body the append script stores: length-prefixed key, type, occurred_at
    (Unix microseconds) and headers, then the payload's bytes."""
    packed_headers = b"".join(field(k.encode()) + field(v.encode()) for k, v in headers.items())
    return (field(key.encode()) + field(type_.encode()) + field(str(occurred_us).encode())
            + field(packed_headers) + payload)


class Outbox:
    def __init__(self, script: str, prefix: str):
        # The script's first line names its layout ("... the Redis append script, layout 3 ...").
        layout = script.split("layout ", 1)[1].split(",", 1)[0] if "layout " in script else "?"
        if layout not in SUPPORTED_LAYOUTS:
            raise SystemExit(f"the append script is for layout {layout}: this code packs "
                             f"layout {sorted(SUPPORTED_LAYOUTS)}")
        self.script = script
        self.base = "{" + prefix + "}:"
        self.events = []

    def add(self, type_: str, key: str, payload: bytes, headers: dict) -> str:
        event_id = str(uuid7())
        self.events += [event_id, key, pack_body(key, type_, now_us(), headers, payload)]
        return event_id

    def queue(self, pipe) -> None:
        """Queues one EVAL for every event added into the pipeline's MULTI."""
        n = len(self.events) // 3
        pipe.eval(self.script, 1, self.base + "pending", self.base, n, *self.events)
        self.events = []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("url")
    ap.add_argument("--prefix", default="outpost")
    ap.add_argument("--script", required=True, help="the output of `outpost schema --store URL`")
    ap.add_argument("--cluster", action="store_true")
    args = ap.parse_args()
    with open(args.script, encoding="utf-8") as f:
        outbox = Outbox(f.read(), args.prefix)
    tag = "{" + args.prefix + "}"
    if args.cluster:
        # redis-py's cluster pipeline has no MULTI: use the connection of the node owning the tag.
        rc = redis.cluster.RedisCluster.from_url(args.url)
        r = rc.get_redis_connection(rc.get_node_from_key(tag))
    else:
        r = redis.Redis.from_url(args.url)
    orders = tag + ":orders"  # a business key in the outbox's slot (same hash tag)

    # One MULTI ... EXEC: the order and its events are written together or not at all.
    events = [
        ("order.placed", "order-42", b'{"order":"order-42","total":1999}',
         {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
        ("order.paid", "order-42", b'{"order":"order-42"}', {"source": "caf\u00e9"}),
        ("customer.updated", "customer-7", b'{"customer":"customer-7"}', {}),
        ("audit.logged", "", b'{"what":"unkeyed"}', {}),
    ]
    pipe = r.pipeline(transaction=True)
    pipe.hset(orders, "order-42", 1999)
    ids = [outbox.add(*e) for e in events]
    outbox.queue(pipe)
    replies = pipe.execute()  # raises on an error reply (OUTPOST_DUPLICATE, OUTPOST_LAYOUT)
    assert replies[-1] == len(events), replies
    for event_id, e in zip(ids, events):
        report(event_id, *e)

    # A MULTI that is discarded takes its event with it.
    gone = ("order.placed", "order-43", b'{"order":"order-43"}', {})
    pipe = r.pipeline(transaction=True)
    pipe.hset(orders, "order-43", 5)
    report(outbox.add(*gone), *gone, committed=False)
    outbox.queue(pipe)
    pipe.reset()  # DISCARD: nothing of it is written

    # A later MULTI: delivered after the events of the same key above.
    later = ("order.shipped", "order-42", b'{"order":"order-42"}', {})
    pipe = r.pipeline(transaction=True)
    pipe.hset(orders, "order-42", 0)
    event_id = outbox.add(*later)
    outbox.queue(pipe)
    pipe.execute()
    report(event_id, *later)


if __name__ == "__main__":
    main()
