#!/usr/bin/env python3
"""The operations issue's "done when", end to end, against an outpost binary and a config file
(scripts/deb-check runs it on the installed package: /usr/bin/outpost and the packaged example
config /usr/share/doc/outpost/examples/outpost.toml):

  - `outpost check --config` accepts the config; `outpost run --config` starts from it, with the
    state in a temporary directory (the config's ${STATE_DIRECTORY}, as systemd sets it), HTTP on
    a free port (${OUTPOST_HTTP_LISTEN}), an admin token (${OUTPOST_ADMIN_TOKEN}) and a local
    webhook receiver (${OUTPOST_WEBHOOK_URL}); READY=1 comes on NOTIFY_SOCKET (Type=notify);
  - an event emitted into the outbox is relayed to the log and consumed into the webhook; /metrics
    shows it (relay delivered, consumer delivered, lag 0); /healthz and /readyz answer 200;
  - the log's path is blocked (a directory in its place): the file sink refuses the next event
    (EISDIR: an attempt, docs/sinks_file_http.md) and it is dead-lettered (outpost_store_dead 1).
    The config is run as a copy with `max_attempts = 1` added to its first [[relay]]: with the
    defaults (20 attempts over hours, docs/relay.md) a dead letter takes hours;
  - the path unblocked, the dead letter is redriven through the dashboard's HTTP API with the
    admin token, with the requests the page makes (GET /api/dead, POST /api/dead/retry as a
    same-origin JSON request); without the token the retry is refused (401); the event is then
    delivered (relay delivered 2, dead 0, the event in the log);
  - SIGTERM drains and the daemon exits 0.

Every wait is for a condition, with a generous bound; nothing depends on the machine's speed.
usage: daemon-check.py OUTPOST_BIN CONFIG
"""

import http.server
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

TIMEOUT = 60  # seconds, for every wait


def fail(message, log=None):
    print(f"[daemon-check] FAILED: {message}", file=sys.stderr)
    if log and os.path.exists(log):
        with open(log, encoding="utf-8", errors="replace") as f:
            print("--- daemon log ---\n" + f.read(), file=sys.stderr)
    sys.exit(1)


def wait_for(what, condition, log=None):
    deadline = time.monotonic() + TIMEOUT
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            fail(f"timed out after {TIMEOUT} s waiting for {what}", log)
        time.sleep(0.05)


class Webhook(http.server.BaseHTTPRequestHandler):
    """Records every POST body; answers 200."""

    bodies = []
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with Webhook.lock:
            Webhook.bodies.append(body.decode("utf-8", "replace"))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def request(port, method, path, body=None, headers=None):
    """(status, text) of one request to the daemon."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    outpost, packaged = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="outpost-daemon-check.")
    # The packaged config, its first [[relay]] refusing after one attempt (see above).
    config = os.path.join(work, "outpost.toml")
    with open(packaged, encoding="utf-8") as f:
        text = f.read()
    if "\n[[relay]]\n" not in text:
        sys.exit(f"[daemon-check] {packaged}: no [[relay]] table")
    with open(config, "w", encoding="utf-8") as f:
        f.write(text.replace("\n[[relay]]\n", "\n[[relay]]\nmax_attempts = 1\n", 1))
    daemon = None
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Webhook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    try:
        state = os.path.join(work, "state")
        os.mkdir(state)
        log = os.path.join(work, "daemon.log")
        token = secrets.token_hex(16)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(os.path.join(work, "notify.sock"))
        notify.settimeout(0.1)
        env = dict(os.environ, STATE_DIRECTORY=state, OUTPOST_HTTP_LISTEN="127.0.0.1:0",
                   OUTPOST_ADMIN_TOKEN=token,
                   OUTPOST_WEBHOOK_URL=f"http://127.0.0.1:{hook.server_port}/events",
                   NOTIFY_SOCKET=os.path.join(work, "notify.sock"))
        store = f"sqlite:{state}/app.db"

        check = subprocess.run([outpost, "check", "--config", config], env=env,
                               capture_output=True, text=True)
        if check.returncode != 0:
            fail(f"outpost check --config {config}: exit {check.returncode}: {check.stderr}")

        with open(log, "w") as out:
            daemon = subprocess.Popen([outpost, "run", "--config", config], env=env,
                                      stdout=out, stderr=subprocess.STDOUT)

        notified = []

        def ready():
            try:
                notified.append(notify.recv(4096).decode())
            except socket.timeout:
                pass
            if daemon.poll() is not None:
                fail(f"the daemon exited ({daemon.returncode})", log)
            return any("READY=1" in n for n in notified)

        wait_for("READY=1 on NOTIFY_SOCKET", ready, log)

        def http_port():
            with open(log, encoding="utf-8", errors="replace") as f:
                m = re.search(r"http on 127\.0\.0\.1:(\d+)", f.read())
            return int(m.group(1)) if m else None

        port = wait_for("the daemon's HTTP port in its log", http_port, log)

        def emit(order):
            r = subprocess.run([outpost, "emit", "--store", store, "--type", "order.created",
                                "--key", order, "--payload", json.dumps({"order": order})],
                               capture_output=True, text=True)
            if r.returncode != 0:
                fail(f"outpost emit: exit {r.returncode}: {r.stderr}", log)

        def metrics_have(*lines):
            def condition():
                status, text = request(port, "GET", "/metrics")
                return status == 200 and all(line + "\n" in text for line in lines)
            return condition

        relay = '{pipeline="orders",store="sqlite",sink="file"}'
        consumer = '{pipeline="orders-webhook",source="file",sink="http"}'

        # 1. Outbox -> log -> webhook, seen in /metrics.
        emit("A-1")
        wait_for("the consumer's delivery to the webhook",
                 lambda: any("A-1" in b for b in Webhook.bodies), log)
        wait_for("/metrics: relay delivered 1, consumer delivered 1, lag 0",
                 metrics_have(f"outpost_relay_delivered_total{relay} 1",
                              f"outpost_consumer_delivered_total{consumer} 1",
                              f"outpost_consumer_lag_messages{consumer} 0"), log)
        for path in ("/healthz", "/readyz"):
            status, text = request(port, "GET", path)
            if status != 200:
                fail(f"GET {path}: {status} {text}", log)

        # 2. The log's path blocked: the next event is dead-lettered.
        path = os.path.join(state, "orders.jsonl")
        os.rename(path, path + ".1")
        os.mkdir(path)
        emit("B-2")
        wait_for("/metrics: one dead letter", metrics_have(f"outpost_store_dead{relay} 1"), log)

        # 3. Redriven from the dashboard's API, as the page does it.
        status, text = request(port, "GET", "/api/dead?pipeline=orders&limit=100")
        if status != 200:
            fail(f"GET /api/dead: {status} {text}", log)
        dead = json.loads(text)
        if dead.get("matching") != 1 or "B-2" not in json.dumps(dead["events"][0]):
            fail(f"GET /api/dead: expected the one dead letter B-2, got {text}", log)
        body = {"pipeline": "orders", "ids": [dead["events"][0]["id"]]}
        page = {"Content-Type": "application/json", "Origin": f"http://127.0.0.1:{port}"}
        status, text = request(port, "POST", "/api/dead/retry", body, page)
        if status != 401:
            fail(f"POST /api/dead/retry without the admin token: expected 401, got {status}", log)
        os.rmdir(path)
        status, text = request(port, "POST", "/api/dead/retry", body,
                               dict(page, Authorization=f"Bearer {token}"))
        if status != 200 or json.loads(text).get("retried") != 1:
            fail(f"POST /api/dead/retry with the admin token: {status} {text}", log)
        wait_for("/metrics: relay delivered 2, no dead letter",
                 metrics_have(f"outpost_relay_delivered_total{relay} 2",
                              f"outpost_store_dead{relay} 0"), log)
        with open(path, encoding="utf-8") as f:
            if "B-2" not in f.read():
                fail("the redriven event is not in the log", log)

        # 4. SIGTERM drains; exit 0.
        daemon.send_signal(signal.SIGTERM)
        try:
            code = daemon.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            fail(f"the daemon did not exit within {TIMEOUT} s of SIGTERM", log)
        daemon = None
        if code != 0:
            fail(f"the daemon exited {code} after SIGTERM", log)
        print("[daemon-check] ok: run from the config, /metrics scraped, a dead letter redriven "
              "through the dashboard API and delivered, drained on SIGTERM")
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        hook.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
