#!/usr/bin/env python3
"""Emit outpost events from Python with psycopg2 (Debian: python3-psycopg2), in the same
transaction as the business write (docs/emit-contract.md, "PostgreSQL").

    python3 emit_postgres.py postgresql://app@db/shop [--schema public] [--table outbox]
    outpost relay --store 'postgresql://relay@db/shop?schema=public&table=outbox' --sink ...

The outbox must exist: `outpost schema --store URL | psql ...`, or any outpost command that
opened it once.
"""

import argparse
import json

import psycopg2
from psycopg2 import sql

from outbox_common import report, uuid7

SUPPORTED_SCHEMA_VERSIONS = {4, 5, 6, 7, 8}  # docs/emit-contract.md, "Versions"


def check_outbox(cur, schema: str, table: str) -> None:
    cur.execute(sql.SQL("SELECT version FROM {}.outpost_schema_version WHERE tbl = %s")
                .format(sql.Identifier(schema)), (table,))
    row = cur.fetchone()
    if not row or row[0] not in SUPPORTED_SCHEMA_VERSIONS:
        raise SystemExit(f"outbox {schema}.{table} has schema version {row and row[0]}: this "
                         f"code writes version {sorted(SUPPORTED_SCHEMA_VERSIONS)}")


def emit(cur, outbox: sql.Composable, type_: str, key: str, payload: bytes,
         headers: dict) -> str:
    """Writes one event; call it inside the caller's transaction. occurred_at, and every column
    not named here, keep their defaults (the partition column `part` is computed)."""
    event_id = uuid7()
    cur.execute(sql.SQL("INSERT INTO {} (id, type, key, payload, headers) "
                        "VALUES (%s::uuid, %s, %s, %s, %s::jsonb)").format(outbox),
                (str(event_id), type_, key, psycopg2.Binary(payload), json.dumps(headers)))
    return event_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("dsn")
    ap.add_argument("--schema", default="public")
    ap.add_argument("--table", default="outbox")
    args = ap.parse_args()
    outbox = sql.Identifier(args.schema, args.table)
    orders = sql.Identifier(args.schema, args.table + "_orders")

    conn = psycopg2.connect(args.dsn)
    with conn, conn.cursor() as cur:
        check_outbox(cur, args.schema, args.table)
        cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (id text PRIMARY KEY, total int)")
                    .format(orders))

    # One transaction (psycopg2: `with conn` commits, or rolls back on an exception): the order
    # row and its events commit together or not at all. The relay is woken at COMMIT.
    events = [
        ("order.placed", "order-42", b'{"order":"order-42","total":1999}',
         {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
        ("order.paid", "order-42", b'{"order":"order-42"}', {"source": "caf\u00e9"}),
        ("customer.updated", "customer-7", b'{"customer":"customer-7"}', {}),
        ("audit.logged", "", b'{"what":"unkeyed"}', {}),
    ]
    with conn, conn.cursor() as cur:
        cur.execute(sql.SQL("INSERT INTO {} (id, total) VALUES ('order-42', 1999)")
                    .format(orders))
        ids = [emit(cur, outbox, *e) for e in events]
    for event_id, e in zip(ids, events):
        report(event_id, *e)

    # A transaction that rolls back takes its event with it.
    gone = ("order.placed", "order-43", b'{"order":"order-43"}', {})
    with conn.cursor() as cur:
        cur.execute(sql.SQL("INSERT INTO {} (id, total) VALUES ('order-43', 5)").format(orders))
        report(emit(cur, outbox, *gone), *gone, committed=False)
    conn.rollback()

    # A later transaction: delivered after the events of the same key above.
    later = ("order.shipped", "order-42", b'{"order":"order-42"}', {})
    with conn, conn.cursor() as cur:
        cur.execute(sql.SQL("UPDATE {} SET total = 0 WHERE id = 'order-42'").format(orders))
        event_id = emit(cur, outbox, *later)
    report(event_id, *later)
    conn.close()


if __name__ == "__main__":
    main()
