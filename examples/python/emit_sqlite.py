#!/usr/bin/env python3
"""Emit outpost events from Python's standard sqlite3 module, in the same transaction as the
business write (docs/emit-contract.md, "SQLite").

    python3 emit_sqlite.py app.db [--table outbox]
    outpost relay --store 'sqlite:app.db?table=outbox' --sink ...

The outbox must exist: `outpost schema --store sqlite:app.db | sqlite3 app.db`, or any outpost
command that opened the file once.
"""

import argparse
import json
import re
import sqlite3

from outbox_common import now_us, report, uuid7

SUPPORTED_SCHEMA_VERSIONS = {3, 4}  # docs/emit-contract.md, "Versions"


def check_outbox(db: sqlite3.Connection, table: str) -> None:
    (version,) = db.execute(f"SELECT max(version) FROM {table}_schema").fetchone()
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise SystemExit(f"outbox '{table}' has schema version {version}: this code writes "
                         f"version {sorted(SUPPORTED_SCHEMA_VERSIONS)}")


def emit(db: sqlite3.Connection, table: str, type_: str, key: str, payload: bytes,
         headers: dict) -> str:
    """Writes one event; call it inside the caller's transaction."""
    event_id = uuid7()
    db.execute(f"INSERT INTO {table} (key) VALUES (?)", (key,))
    db.execute(f"INSERT INTO {table}_body (seq, id, type, payload, occurred_at, headers) "
               "VALUES (last_insert_rowid(), ?, ?, ?, ?, ?)",
               (event_id.bytes, type_, payload, now_us(),
                json.dumps(headers) if headers else None))
    return event_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("database")
    ap.add_argument("--table", default="outbox")
    args = ap.parse_args()
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", args.table):
        raise SystemExit(f"--table '{args.table}' is not a valid table name")
    t = args.table

    # Autocommit mode: transactions are the explicit BEGIN IMMEDIATE ... COMMIT below.
    # IMMEDIATE takes the write lock up front; busy_timeout waits for the relay instead of failing.
    db = sqlite3.connect(args.database, isolation_level=None)
    db.execute("PRAGMA busy_timeout = 30000")
    db.execute("PRAGMA journal_mode = WAL")
    check_outbox(db, t)
    db.execute(f"CREATE TABLE IF NOT EXISTS {t}_orders (id TEXT PRIMARY KEY, total INTEGER)")

    # One transaction: the order row and its events commit together or not at all.
    db.execute("BEGIN IMMEDIATE")
    db.execute(f"INSERT INTO {t}_orders (id, total) VALUES ('order-42', 1999)")
    events = [
        ("order.placed", "order-42", b'{"order":"order-42","total":1999}',
         {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
        ("order.paid", "order-42", b'{"order":"order-42"}', {"source": "caf\u00e9"}),
        ("customer.updated", "customer-7", b'{"customer":"customer-7"}', {}),
        ("audit.logged", "", b'{"what":"unkeyed"}', {}),
    ]
    ids = [emit(db, t, *e) for e in events]
    db.execute("COMMIT")
    for event_id, e in zip(ids, events):
        report(event_id, *e)

    # A transaction that rolls back takes its event with it.
    db.execute("BEGIN IMMEDIATE")
    db.execute(f"INSERT INTO {t}_orders (id, total) VALUES ('order-43', 5)")
    gone = ("order.placed", "order-43", b'{"order":"order-43"}', {})
    report(emit(db, t, *gone), *gone, committed=False)
    db.execute("ROLLBACK")

    # A later transaction: delivered after the events of the same key above.
    db.execute("BEGIN IMMEDIATE")
    db.execute(f"UPDATE {t}_orders SET total = 0 WHERE id = 'order-42'")
    later = ("order.shipped", "order-42", b'{"order":"order-42"}', {})
    event_id = emit(db, t, *later)
    db.execute("COMMIT")
    report(event_id, *later)


if __name__ == "__main__":
    main()
