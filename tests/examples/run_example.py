#!/usr/bin/env python3
"""Runs one emit example of examples/python or examples/node against a real store and checks
that `outpost relay` delivers what it emitted exactly as it delivers `outpost emit`'s events
(docs/emit-contract.md). Registered as CTest tests by tests/examples/CMakeLists.txt.

    run_example.py OUTPOST LANG STORE EXAMPLES_DIR WORK_DIR [NODE_MODULES]

LANG: python | node. STORE: sqlite | postgres | redis | redis_cluster (servers from
OUTPOST_TEST_PG_URL, OUTPOST_TEST_REDIS_URL, OUTPOST_TEST_REDIS_CLUSTER_URL, as tests/servers/*.sh
print them). The outbox is created from `outpost schema` (SQL) and the Redis script is the one
`outpost schema` prints, so the printed contract itself is under test.
Exit 0 ok, 1 failure, 77 skipped (a server or client library missing and
OUTPOST_TEST_REQUIRE_ALL unset; node and npm missing, whatever it says).
"""

import datetime
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys

SKIP = 77


def fail(message: str) -> None:
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def skip(message: str, required: bool = True) -> None:
    if required and os.environ.get("OUTPOST_TEST_REQUIRE_ALL") == "1":
        fail(f"{message} (OUTPOST_TEST_REQUIRE_ALL=1)")
    print(f"SKIP: {message}", file=sys.stderr)
    sys.exit(SKIP)


def run(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    if r.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def need_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        skip(f"{name} is not set (tests/servers/*.sh start the servers)")
    return value


def main() -> None:
    outpost, lang, store, examples, work = sys.argv[1:6]
    node_modules = sys.argv[6] if len(sys.argv) > 6 else ""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    name = f"ex_{lang}_{secrets.token_hex(4)}"
    env = dict(os.environ)
    kind = "redis" if store.startswith("redis") else store
    if lang == "python":
        cmd = [sys.executable, os.path.join(examples, "python", f"emit_{kind}.py")]
    else:
        node = shutil.which("node")
        # Not required: scripts/packages cannot list Debian's npm (npm_ci.sh says why).
        if not node or not shutil.which("npm"):
            skip("node or npm is not installed (Debian: nodejs npm)", required=False)
        if not node_modules or not os.path.isdir(node_modules):
            skip(f"no node_modules at '{node_modules}' (npm ci failed or was not run)")
        env["NODE_PATH"] = node_modules
        cmd = [node, os.path.join(examples, "node", f"emit_{kind}.js")]

    cleanup = None
    if store == "sqlite":
        db = os.path.join(work, "app.db")
        url = f"sqlite:{db}?table=outbox"
        with sqlite3.connect(db) as c:
            c.executescript(run([outpost, "schema", "--store", url]).stdout)
        cmd += [db, "--table", "outbox"]
    elif store == "postgres":
        base = need_env("OUTPOST_TEST_PG_URL")
        try:
            import psycopg2
        except ImportError:
            skip("python3-psycopg2 is not installed")
        url = f"{base}?schema={name}&table=outbox&partitions=4"
        conn = psycopg2.connect(base)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(run([outpost, "schema", "--store", url]).stdout)

        def cleanup():
            with conn.cursor() as cur:
                cur.execute(f'DROP SCHEMA "{name}" CASCADE')
        cmd += [base, "--schema", name, "--table", "outbox"]
    else:
        if store == "redis":
            base = need_env("OUTPOST_TEST_REDIS_URL")
            seed, extra = base, []
        else:
            base = need_env("OUTPOST_TEST_REDIS_CLUSTER_URL")
            # redis://h1:p1,h2:p2,.../0: the example takes one node and finds the slot's owner.
            seed, extra = "redis://" + base[len("redis://"):].split(",")[0].split("/")[0], ["--cluster"]
        url = f"{base}?prefix={name}"
        script = os.path.join(work, "outpost_append.lua")
        with open(script, "w", encoding="utf-8") as f:
            f.write(run([outpost, "schema", "--store", url]).stdout)
        cmd += [seed, "--prefix", name, "--script", script] + extra

    try:
        emitted = [json.loads(line) for line in run(cmd, env=env).stdout.splitlines() if line]
        # One event by the CLI after the example's, on a key the example used: delivered after
        # them, and in the same form.
        cli_id = run([outpost, "emit", "--store", url, "--type", "order.archived", "--key",
                      "order-42", "--header", "source=cli", "--payload",
                      '{"order":"order-42"}']).stdout.strip()
        out = os.path.join(work, "delivered.jsonl")
        run([outpost, "relay", "--store", url, "--sink", f"file:{out}", "--until-empty"])
        with open(out, encoding="utf-8") as f:
            delivered = [json.loads(line) for line in f if line.strip()]
    finally:
        if cleanup:
            cleanup()

    check(emitted, delivered, cli_id)
    print(f"ok: {lang} {store}: {len(delivered)} events delivered as emitted")


def timestamp(rfc3339: str) -> float:
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def check(emitted, delivered, cli_id) -> None:
    committed = [e for e in emitted if e["committed"]]
    if len(committed) < 5 or len(committed) == len(emitted):
        fail(f"the example reported {len(emitted)} events, {len(committed)} committed: "
             "expected committed ones and a rolled-back one")
    ids = [d["id"] for d in delivered]
    if len(ids) != len(set(ids)):
        fail(f"an event was delivered twice: {ids}")
    want = [e["id"] for e in committed] + [cli_id]
    if set(ids) != set(want):
        fail(f"delivered {sorted(ids)}, expected exactly {sorted(want)} "
             f"(rolled back: {[e['id'] for e in emitted if not e['committed']]})")
    by_id = {d["id"]: d for d in delivered}
    cli = by_id[cli_id]
    for e in committed:
        d = by_id[e["id"]]
        for field in ("type", "key", "payload"):
            if d.get(field, "") != e[field]:
                fail(f"event {e['id']}: {field} {d.get(field)!r}, emitted {e[field]!r}")
        for k, v in e["headers"].items():
            if d.get("headers", {}).get(k) != v:
                fail(f"event {e['id']}: header {k} = {d.get('headers', {}).get(k)!r}, "
                     f"emitted {v!r}")
        # occurred_at in the right unit: within a day of the CLI's event, not in 1970 or later.
        if abs(timestamp(d["occurred_at"]) - timestamp(cli["occurred_at"])) > 86400:
            fail(f"event {e['id']}: occurred_at {d['occurred_at']}, the CLI's event "
                 f"{cli['occurred_at']}")
        # Same fields as the CLI's event (headers, key and key_seq only appear when there are
        # any: key_seq is the position of a keyed event, docs/sinks.md "Key position").
        optional = {"key", "headers", "key_seq"}
        if set(d) - optional != set(cli) - optional:
            fail(f"event {e['id']} has the fields {sorted(d)}, `outpost emit`'s has {sorted(cli)}")
        if bool(d.get("key")) != ("key_seq" in d):
            fail(f"event {e['id']}: key {d.get('key')!r} with key_seq {d.get('key_seq')!r}")
    # Order per key: as emitted (transaction order, then the CLI's event last).
    keyed = [(e["key"], e["id"]) for e in committed] + [("order-42", cli_id)]
    for key in {k for k, _ in keyed if k}:
        expect = [i for k, i in keyed if k == key]
        got = [i for i in ids if by_id[i].get("key", "") == key]
        if got != expect:
            fail(f"key {key}: delivered in the order {got}, emitted {expect}")


if __name__ == "__main__":
    main()
