#!/usr/bin/env python3
"""`outpost schema` (docs/cli.md, "schema"; docs/emit-contract.md): the DDL it prints builds the
same outbox as outpost builds itself (so a schema change in a store that the printed text misses
fails here), and its URL checks are those of every command (exit 2, nothing opened).

    schema_test.py OUTPOST WORK_DIR

PostgreSQL and Redis parts use OUTPOST_TEST_PG_URL / OUTPOST_TEST_REDIS_URL when set (required
with OUTPOST_TEST_REQUIRE_ALL=1). Exit 0 ok, 1 failure.
"""

import json
import os
import re
import secrets
import shutil
import sqlite3
import subprocess
import sys

failures = []


def check(ok: bool, message: str) -> None:
    if not ok:
        failures.append(message)
        print(f"FAIL: {message}", file=sys.stderr)


def outpost(*args, env=None):
    return subprocess.run([OUTPOST, *args], capture_output=True, text=True, timeout=120, env=env)


def sqlite_objects(path: str):
    with sqlite3.connect(path) as c:
        objects = sorted(c.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                                   "WHERE name NOT LIKE 'sqlite_%'").fetchall())
        version = c.execute("SELECT version FROM ev_schema").fetchall()
    return objects, version


def test_sqlite(work: str) -> None:
    by_outpost = os.path.join(work, "by_outpost.db")
    by_ddl = os.path.join(work, "by_ddl.db")
    r = outpost("emit", "--store", f"sqlite:{by_outpost}?table=ev", "--type", "t", "--payload", "{}")
    check(r.returncode == 0, f"emit into a new SQLite file: {r.stderr}")
    r = outpost("schema", "--store", f"sqlite:{by_ddl}?table=ev")
    check(r.returncode == 0 and r.stdout.startswith("-- outpost emit contract: SQLite outbox 'ev'"),
          f"schema sqlite: exit {r.returncode}, {r.stdout[:100]!r} {r.stderr}")
    check(not os.path.exists(by_ddl), "schema created the SQLite file")
    with sqlite3.connect(by_ddl) as c:
        c.executescript(r.stdout)
    a, b = sqlite_objects(by_outpost), sqlite_objects(by_ddl)
    check(a == b, f"the printed SQLite DDL builds another outbox than outpost:\n{a}\n{b}")


def pg_shape(cur, schema: str):
    """The outbox's tables, columns, indexes, constraints, triggers and functions, with the
    schema's name taken out."""
    queries = [
        "SELECT table_name, column_name, data_type, is_nullable, column_default, "
        "generation_expression FROM information_schema.columns WHERE table_schema = %s",
        "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = %s",
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(c.oid) FROM pg_constraint c "
        "JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = %s",
        "SELECT event_object_table, trigger_name, action_statement FROM "
        "information_schema.triggers WHERE trigger_schema = %s",
        "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON "
        "n.oid = p.pronamespace WHERE n.nspname = %s",
        "SELECT c.relname, c.reloptions::text FROM pg_class c JOIN pg_namespace n ON "
        "n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p')",
    ]
    shape = []
    for q in queries:
        cur.execute(q, (schema,))
        # The notification channel's name ends in a hash of schema.table.
        shape.append(sorted(tuple(re.sub(r"outpost_ev_[0-9a-f]{8}", "CHANNEL",
                                         str(v).replace(schema, "S")) for v in row)
                            for row in cur.fetchall()))
    cur.execute(f'SELECT tbl, version FROM "{schema}".outpost_schema_version')
    shape.append(cur.fetchall())
    cur.execute(f'SELECT count(*) FROM "{schema}".ev_partitions')
    shape.append(cur.fetchall())
    return shape


def test_postgres() -> None:
    base = os.environ.get("OUTPOST_TEST_PG_URL")
    if not base:
        check(os.environ.get("OUTPOST_TEST_REQUIRE_ALL") != "1", "OUTPOST_TEST_PG_URL is not set")
        return
    import psycopg2
    a, b = f"schema_a_{secrets.token_hex(4)}", f"schema_b_{secrets.token_hex(4)}"
    conn = psycopg2.connect(base)
    conn.autocommit = True
    try:
        r = outpost("emit", "--store", f"{base}?schema={a}&table=ev&partitions=8", "--type", "t",
                    "--payload", "{}")
        check(r.returncode == 0, f"emit into a new PostgreSQL outbox: {r.stderr}")
        r = outpost("schema", "--store", f"{base}?schema={b}&table=ev&partitions=8")
        check(r.returncode == 0 and "schema version" in r.stdout.splitlines()[0],
              f"schema postgres: exit {r.returncode} {r.stderr}")
        with conn.cursor() as cur:
            cur.execute(r.stdout)
            check(pg_shape(cur, a) == pg_shape(cur, b),
                  "the printed PostgreSQL DDL builds another outbox than outpost:\n"
                  f"{pg_shape(cur, a)}\n{pg_shape(cur, b)}")
        # Applying it again (a migration tool rerunning it) changes nothing and fails nothing.
        with conn.cursor() as cur:
            cur.execute(r.stdout)
        # The password is never printed.
        secret = base.replace("postgresql://postgres@", "postgresql://postgres:s3cr3tpw@")
        r = outpost("schema", "--store", f"{secret}?schema={b}&table=ev")
        check(r.returncode == 0 and "s3cr3tpw" not in r.stdout + r.stderr,
              "schema printed the URL's password")
    finally:
        with conn.cursor() as cur:
            for s in (a, b):
                cur.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')


def test_redis() -> None:
    r = outpost("schema", "--store", "redis://127.0.0.1:1/0?prefix=shop")
    check(r.returncode == 0, f"schema redis needs no server: {r.stderr}")
    check("EVAL <this script> 1 {shop}:pending {shop}: N" in r.stdout, "the call is not printed")
    check("redis.call('PUBLISH', B .. 'wake', '1')" in r.stdout, "not the append script")


def fnv1a(data: bytes) -> int:
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def test_redis_partitioned(work: str) -> None:
    """On a partitioned outbox (partitions=N) the printed call names the partition's key space:
    an event EVALed as printed is delivered by the relay (the unpartitioned names are refused
    with OUTPOST_PARTITIONS)."""
    base = os.environ.get("OUTPOST_TEST_REDIS_URL")
    if not base:
        check(os.environ.get("OUTPOST_TEST_REQUIRE_ALL") != "1",
              "OUTPOST_TEST_REDIS_URL is not set")
        return
    import redis
    prefix = f"schema_{secrets.token_hex(4)}"
    url = f"{base}?prefix={prefix}&partitions=4"
    client = redis.Redis.from_url(base)
    try:
        r = outpost("emit", "--store", url, "--type", "t", "--key", "other", "--payload", "{}")
        check(r.returncode == 0, f"emit into a partitioned Redis outbox: {r.stderr}")
        r = outpost("schema", "--store", url)
        check(r.returncode == 0 and "4 partitions" in r.stdout,
              f"schema redis partitions=4: exit {r.returncode} {r.stderr}")
        call = next((line for line in r.stdout.splitlines() if "EVAL <this script> 1 " in line), "")
        words = call.split()
        if len(words) < 7:
            check(False, f"no EVAL call printed: {call!r}")
            return
        key = "acct-1"
        part = f"p{fnv1a(key.encode()) % 4}"
        keys_name, b = words[5].replace("pK", part), words[6].replace("pK", part)
        event_id = "01a21c00-0000-7000-8000-00000000abcd"
        body = b"".join(str(len(f)).encode() + b":" + f for f in
                        (key.encode(), b"t.scheduled", b"1764000000000000", b"")) + b"{}"
        try:
            client.eval(r.stdout, 1, keys_name, b, 1, event_id, key, body)
        except redis.exceptions.ResponseError as e:
            check(False, f"the printed call ({keys_name} {b}) is refused: {e}")
            return
        out = os.path.join(work, "partitioned.jsonl")
        r = outpost("relay", "--store", url, "--sink", f"file:{out}", "--until-empty", "--quiet")
        check(r.returncode == 0, f"relay of the partitioned outbox: {r.stderr}")
        with open(out) as f:
            ids = [json.loads(line)["id"] for line in f if line.strip()]
        check(event_id in ids, f"the EVALed event was not delivered: {ids}")
    finally:
        for k in client.scan_iter(match=f"{{{prefix}*"):
            client.delete(k)


def test_refusals(work: str) -> None:
    cases = [
        (["--store", "memory:"], "memory store"),
        (["--store", f"sqlite:{work}/x.db?tabel=ev"], "unknown parameter 'tabel'"),
        (["--store", f"sqlite:{work}/x.db?table=1bad"], "'1bad' is invalid"),
        (["--store", "nosuch://x"], "nosuch"),
        (["--store", "redis://127.0.0.1:1/0?prefix=a b"], "prefix"),
        ([], "--store"),
    ]
    env = {k: v for k, v in os.environ.items() if k != "OUTPOST_STORE"}
    for args, words in cases:
        r = outpost("schema", *args, env=env)
        check(r.returncode == 2 and words in r.stderr and r.stdout == "",
              f"schema {args}: exit {r.returncode}, stderr {r.stderr!r} (expected 2 naming "
              f"{words!r}, nothing on stdout)")
    check(not os.path.exists(f"{work}/x.db"), "a refused URL created its SQLite file")
    r = outpost("schema", "--help")
    check(r.returncode == 0 and "emit contract" in r.stdout, "schema --help")


if __name__ == "__main__":
    OUTPOST, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    test_sqlite(work)
    test_postgres()
    test_redis()
    test_redis_partitioned(work)
    test_refusals(work)
    sys.exit(1 if failures else 0)
