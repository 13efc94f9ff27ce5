#!/usr/bin/python3
"""The operator dashboard end to end in headless Chromium (Debian chromium + chromium-driver +
python3-selenium): a daemon whose webhook sink fails, the numbers moving on the overview, the dead
letters filtered and paged, a retry refused without the admin token and with a wrong one (told
apart), a retry with the token delivered once the webhook works again, a per-row discard that
asks first, a cross-site POST refused. Two more pipelines: "payments", whose webhook always fails
with a long backoff, so its key is blocked behind a failing head (the blocked keys view); "slow",
whose webhook holds the request, so a relay holds a lease (the leases view). A [[consume]]
pipeline "audit" copies a log written beforehand, "parked" parks the same log's messages at the
failing webhook (the consumers view; its dead letters counted on the overview and shown as
events in the dead letters view, one discarded, then the rest by filter). Each tab has its own
URL (reload and back keep it); after a SIGHUP renames "payments" the pickers follow.

    dashboard_test.py OUTPOST_BIN [SCREENSHOT_DIR]

Exit 0 ok, 1 failure, 77 skipped (selenium/chromium missing and OUTPOST_TEST_REQUIRE_ALL unset).
"""
import http.server
import json
import os
import re
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

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:
    webdriver = None

TOKEN = "s3cret-admin-token"


class Webhook(http.server.BaseHTTPRequestHandler):
    """/hook fails every POST until `ok` is set, then records the delivered event ids; /blocked
    always fails; /slow answers only once `release` is set (or after 90 s)."""
    ok = False
    received = []
    release = threading.Event()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        if self.path.startswith("/slow"):
            Webhook.release.wait(90)
            self.send_response(200)
        elif self.path.startswith("/hook") and Webhook.ok:
            Webhook.received.append(self.headers.get("Idempotency-Key", ""))
            self.send_response(200)
        else:
            self.send_response(500)
        self.end_headers()

    def log_message(self, *args):
        pass


def wait(what, predicate, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception:  # the page may be mid-render
            pass
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def main():
    outpost = sys.argv[1]
    shots = sys.argv[2] if len(sys.argv) > 2 else None
    chromedriver = shutil.which("chromedriver")
    if webdriver is None or chromedriver is None:
        print("dashboard_test: selenium or chromedriver missing (Debian: chromium chromium-driver "
              "python3-selenium)")
        return 1 if os.environ.get("OUTPOST_TEST_REQUIRE_ALL") == "1" else 77

    work = tempfile.mkdtemp(prefix="outpost-browser-")
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Webhook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    db = os.path.join(work, "app.db")
    for i, kind in enumerate(["order.placed", "order.placed", "user.created"]):
        subprocess.run([outpost, "emit", "--store", "sqlite:" + db, "--type", kind, "--key",
                        "key-%d" % i, "--payload", json.dumps({"n": i})], check=True,
                       stdout=subprocess.DEVNULL)
    payments, slow = os.path.join(work, "payments.db"), os.path.join(work, "slow.db")
    for kind, key in [("payment.captured", "acct-7"), ("payment.refunded", "acct-7")]:
        subprocess.run([outpost, "emit", "--store", "sqlite:" + payments, "--type", kind,
                        "--key", key, "--payload", "{}"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([outpost, "emit", "--store", "sqlite:" + slow, "--type", "report.built",
                    "--key", "report-1", "--payload", "{}"], check=True,
                   stdout=subprocess.DEVNULL)
    feed, log = os.path.join(work, "feed.db"), os.path.join(work, "log.jsonl")
    for i in range(2):
        subprocess.run([outpost, "emit", "--store", "sqlite:" + feed, "--type", "audit.entry",
                        "--key", "a-%d" % i, "--payload", json.dumps({"entry": i})], check=True,
                       stdout=subprocess.DEVNULL)
    subprocess.run([outpost, "relay", "--store", "sqlite:" + feed, "--sink", "file:" + log,
                    "--until-empty"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    config = os.path.join(work, "outpost.toml")

    def write_config(payments_name):
        with open(config, "w") as f:
            f.write('[http]\nlisten = "127.0.0.1:0"\nadmin_token = "${TEST_ADMIN_TOKEN}"\n\n'
                    '[[relay]]\nname = "orders"\nstore = "sqlite:%s"\n'
                    'sink = "http://127.0.0.1:%d/hook"\nmax_attempts = 2\nbackoff_base_ms = 10\n'
                    'backoff_max_ms = 50\nquiet = true\n' % (db, hook.server_address[1]))
            f.write('\n[[relay]]\nname = "%s"\nstore = "sqlite:%s"\n'
                    'sink = "http://127.0.0.1:%d/blocked"\nmax_attempts = 100\n'
                    'backoff_base_ms = 60000\nbackoff_max_ms = 60000\nquiet = true\n'
                    % (payments_name, payments, hook.server_address[1]))
            f.write('\n[[relay]]\nname = "slow"\nstore = "sqlite:%s"\n'
                    'sink = "http://127.0.0.1:%d/slow?timeout_ms=90000"\nlease_ms = 60000\n'
                    'max_attempts = 100\nquiet = true\n'
                    % (slow, hook.server_address[1]))
            f.write('\n[[consume]]\nname = "audit"\nfrom = "file:%s"\ngroup = "audit"\n'
                    'checkpoint = "sqlite:%s"\nsink = "file:%s"\n'
                    % (log, os.path.join(work, "checkpoints.db"),
                       os.path.join(work, "copy.jsonl")))
            f.write('\n[[consume]]\nname = "parked"\nfrom = "file:%s"\ngroup = "parked"\n'
                    'checkpoint = "sqlite:%s"\nsink = "http://127.0.0.1:%d/blocked"\n'
                    'max_attempts = 1\n'
                    % (log, os.path.join(work, "checkpoints.db"), hook.server_address[1]))

    write_config("payments")
    log_path = os.path.join(work, "run.log")
    env = dict(os.environ, TEST_ADMIN_TOKEN=TOKEN)
    daemon = subprocess.Popen([outpost, "run", "--config", config], env=env,
                              stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    driver = None
    try:
        port = wait("the daemon's http port", lambda: re.search(
            r"http on 127\.0\.0\.1:(\d+)", open(log_path).read()))
        base = "http://127.0.0.1:%s" % port.group(1)

        options = webdriver.ChromeOptions()
        for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,900"]:
            options.add_argument(arg)
        if os.path.exists("/usr/bin/chromium"):
            options.binary_location = "/usr/bin/chromium"
        driver = webdriver.Chrome(service=Service(chromedriver), options=options)
        driver.get(base + "/")
        text = lambda id_: driver.find_element(By.ID, id_).text
        visible = lambda id_: driver.find_element(By.ID, id_).is_displayed()
        fragment = lambda: driver.execute_script("return location.hash")
        # (textContent: also the cells of a tab not shown)
        row_cells = lambda css: [c.get_attribute("textContent") for c in driver.find_elements(
            By.CSS_SELECTOR, css + " td")]
        options = lambda id_: [o.get_attribute("value") for o in
                               Select(driver.find_element(By.ID, id_)).options]

        # Clicks an element found afresh on each try: the page re-renders tables (every second
        # for the overview and consumers), so an element found a moment ago may be gone.
        def click(what, find):
            wait(what, lambda: find().click() or True)

        # The numbers move: all three events fail twice and end as dead letters; the consumer
        # group "parked" parks both messages of its log. The total counts both kinds.
        wait("5 dead letters on the overview (3 of orders, 2 of the group parked)",
             lambda: text("dead-total") == "5")
        wait("the pipeline row", lambda: "orders" in text("pipelines"))
        # A consume pipeline's row shows its group's figures, not "-": its log, lag, dead
        # letters, delivered and failed attempts.
        parked_row = lambda: row_cells('#pipelines tr.pl-row[data-name="parked"]')
        wait("parked's figures", lambda: parked_row()[1] == "log: file" and parked_row()[4] == "0"
             and parked_row()[6] == "2" and parked_row()[7] == "0" and parked_row()[8] == "2")
        audit_row = lambda: row_cells('#pipelines tr.pl-row[data-name="audit"]')
        wait("audit's figures", lambda: audit_row()[4] == "0" and audit_row()[7] == "2")
        time.sleep(2.5)  # a few chart samples
        if shots:
            driver.save_screenshot(os.path.join(shots, "overview.png"))

        # Blocked keys: payments' key waits behind its failing head, with the webhook's error.
        driver.find_element(By.ID, "tab-blocked").click()
        Select(driver.find_element(By.ID, "bk-pipeline")).select_by_value("payments")
        # (the view re-renders every second: find the row again on each look)
        row = lambda: driver.find_element(By.CSS_SELECTOR, '#bk-table tr.bk-row[data-key="acct-7"]')
        wait("acct-7 blocked with its error",
             lambda: "500" in row().text and "payment.captured" in row().text)
        assert text("bk-count") == "1", text("bk-count")
        if shots:
            driver.save_screenshot(os.path.join(shots, "blocked-keys.png"))
        # The tab and its pipeline are in the URL: a reload shows them again.
        wait("the blocked tab's URL", lambda: fragment() == "#blocked?pipeline=payments")
        driver.refresh()
        wait("the blocked tab after a reload", lambda: visible("blocked") and not visible("overview"))
        wait("payments still chosen after the reload", lambda: Select(driver.find_element(
            By.ID, "bk-pipeline")).first_selected_option.get_attribute("value") == "payments")
        wait("acct-7 after the reload", lambda: "payment.captured" in row().text)

        # Relays and leases: slow's relay holds report-1 under a lease while the webhook waits.
        driver.find_element(By.ID, "tab-leases").click()
        wait("the relays", lambda: "payments" in text("relays") and "slow" in text("relays"))
        Select(driver.find_element(By.ID, "ls-pipeline")).select_by_value("slow")
        wait("slow's lease on report-1, expiring in N s", lambda: [r.text for r in driver.find_elements(
            By.CSS_SELECTOR, "#ls-table tr.ls-row") if "report-1" in r.text and "in " in r.text])
        if shots:
            driver.save_screenshot(os.path.join(shots, "leases.png"))
        # Back goes to the previous tab (the leases tab with slow, then the leases tab, then
        # blocked keys).
        driver.back()
        driver.back()
        wait("back on the blocked tab", lambda: visible("blocked") and not visible("leases"))

        # Consumers: the audit group caught up with its log (lag 0), both messages delivered.
        driver.find_element(By.ID, "tab-consumers").click()
        cells = lambda: row_cells('#cs-table tr.cs-row[data-group="audit"]')
        wait("audit caught up", lambda: cells()[5] == "0" and cells()[7] == "2")
        wait("audit running with a position", lambda: cells()[3] == "running"
             and cells()[4] not in ("", "-"))
        if shots:
            driver.save_screenshot(os.path.join(shots, "consumers.png"))
        # parked's dead count leads to its dead letters: the events, as a relay's are shown.
        click("parked's dead count", lambda: driver.find_element(
            By.CSS_SELECTOR, '#cs-table tr.cs-row[data-group="parked"] a'))
        wait("the dead letters tab for parked", lambda: visible("dead")
             and fragment().startswith("#dead?pipeline=parked"))
        dl_rows = lambda: driver.find_elements(By.CSS_SELECTOR, "#dl-table tr.dl-row")
        wait("parked's 2 dead letters as events", lambda: len(dl_rows()) == 2
             and all("audit.entry" in r.text and "500" in r.text for r in dl_rows()))
        click("View", lambda: dl_rows()[0].find_element(By.CSS_SELECTOR, "button.view"))
        wait("the consumer dead letter's payload as JSON",
             lambda: '"entry": 0' in driver.find_element(By.CSS_SELECTOR, "pre.payload").text)

        # Dead letters, filtered by type.
        driver.find_element(By.ID, "tab-dead").click()
        Select(driver.find_element(By.ID, "dl-pipeline")).select_by_value("orders")
        wait("3 dead letters listed", lambda: text("dl-matching") == "3")
        driver.find_element(By.ID, "f-type").send_keys("order.placed")
        driver.find_element(By.ID, "f-apply").click()
        wait("the filter", lambda: text("dl-matching") == "2" and len(dl_rows()) == 2)
        assert "type=order.placed" in fragment(), fragment()
        rows = dl_rows()
        assert all("order.placed" in r.text for r in rows)
        assert "500" in rows[0].text, rows[0].text  # the webhook's error is shown
        click("View", lambda: dl_rows()[0].find_element(By.CSS_SELECTOR, "button.view"))
        wait("the payload", lambda: '"n"' in driver.find_element(By.CSS_SELECTOR, "pre.payload").text)
        if shots:
            driver.save_screenshot(os.path.join(shots, "dead-letters.png"))

        # Pages: two a page (limit in the URL), then the next page, then back.
        driver.get(base + "/#dead?pipeline=orders&limit=2")
        wait("the first page of 2", lambda: len(dl_rows()) == 2 and text("dl-range") == "1-2 of 3")
        assert not driver.find_element(By.ID, "dl-next").get_attribute("disabled")
        first_page = [r.get_attribute("data-id") for r in dl_rows()]
        driver.find_element(By.ID, "dl-next").click()
        wait("the second page", lambda: len(dl_rows()) == 1 and text("dl-range") == "3-3 of 3")
        assert "offset=2" in fragment(), fragment()
        assert dl_rows()[0].get_attribute("data-id") not in first_page
        assert driver.find_element(By.ID, "dl-next").get_attribute("disabled")
        driver.back()
        wait("the first page again", lambda: text("dl-range") == "1-2 of 3")
        driver.get(base + "/#dead?pipeline=orders&type=order.placed")
        wait("the filter from the URL", lambda: text("dl-matching") == "2" and len(dl_rows()) == 2)
        rows = dl_rows()

        # A mutation without the token is refused as "admin token required", with a wrong one
        # as "wrong admin token"; nothing changes.
        target = rows[0].get_attribute("data-id")
        row = lambda: driver.find_element(By.CSS_SELECTOR, '#dl-table tr.dl-row[data-id="%s"]' % target)
        click("Retry", lambda: row().find_element(By.CSS_SELECTOR, "button.retry"))
        wait("the refusal without a token", lambda: "admin token required" in text("msg")
             and "401" in text("msg"))
        assert text("dl-matching") == "2"
        if shots:
            driver.save_screenshot(os.path.join(shots, "refused-without-token.png"))
        driver.find_element(By.ID, "token").send_keys("not-the-token")
        driver.find_element(By.ID, "token-save").click()
        click("Retry", lambda: row().find_element(By.CSS_SELECTOR, "button.retry"))
        wait("the refusal of a wrong token", lambda: "wrong admin token" in text("msg"))
        assert "required" not in text("msg"), text("msg")
        assert text("dl-matching") == "2"

        # With the token, once the webhook works: retried, delivered, gone from the dead letters.
        Webhook.ok = True
        driver.find_element(By.ID, "token").clear()
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "token-save").click()
        click("Retry", lambda: row().find_element(By.CSS_SELECTOR, "button.retry"))
        wait("retried 1", lambda: "retried 1" in text("msg"))
        wait("the webhook receiving it", lambda: target in Webhook.received)
        driver.find_element(By.ID, "tab-overview").click()
        wait("delivered 1 on the overview", lambda: text("delivered-total") == "1")
        wait("4 dead letters left", lambda: text("dead-total") == "4")
        if shots:
            driver.save_screenshot(os.path.join(shots, "after-retry.png"))

        # Discarding one dead letter asks first; declined, nothing changes.
        driver.find_element(By.ID, "tab-dead").click()
        driver.find_element(By.ID, "f-type").clear()
        driver.find_element(By.ID, "f-apply").click()
        wait("2 matching", lambda: text("dl-matching") == "2" and len(dl_rows()) == 2)
        click("Discard", lambda: dl_rows()[0].find_element(By.CSS_SELECTOR, "button.discard"))
        alert = WebDriverWait(driver, 30).until(expected_conditions.alert_is_present())
        assert "discard dead letter" in alert.text and "orders" in alert.text, alert.text
        alert.dismiss()
        wait("the discard declined", lambda: "cancelled" in text("msg"))
        assert text("dl-matching") == "2"

        # Bulk: preview count + confirmation, then every match retried.
        driver.find_element(By.ID, "bulk-retry").click()
        alert = WebDriverWait(driver, 30).until(expected_conditions.alert_is_present())
        assert "retry 2 dead letters" in alert.text, alert.text
        alert.accept()
        wait("retried 2", lambda: "retried 2" in text("msg"))
        wait("all delivered", lambda: len(Webhook.received) == 3)

        # A consumer group's dead letter discarded from the page, after its confirmation; then
        # the rest by filter, as a relay's.
        Select(driver.find_element(By.ID, "dl-pipeline")).select_by_value("parked")
        wait("parked's dead letters", lambda: text("dl-matching") == "2" and len(dl_rows()) == 2)
        click("Discard", lambda: dl_rows()[0].find_element(By.CSS_SELECTOR, "button.discard"))
        alert = WebDriverWait(driver, 30).until(expected_conditions.alert_is_present())
        assert "discard dead letter" in alert.text and "parked" in alert.text, alert.text
        alert.accept()
        wait("discarded 1", lambda: "discarded 1" in text("msg"))
        wait("1 dead letter left", lambda: len(dl_rows()) == 1 and text("dl-matching") == "1")
        driver.find_element(By.ID, "f-type").send_keys("audit.entry")
        driver.find_element(By.ID, "f-apply").click()
        wait("the filter on parked", lambda: text("dl-matching") == "1")
        driver.find_element(By.ID, "bulk-discard").click()
        alert = WebDriverWait(driver, 30).until(expected_conditions.alert_is_present())
        assert "discard 1 dead letters of parked" in alert.text, alert.text
        alert.accept()
        wait("discarded 1 by filter", lambda: text("dl-matching") == "0")
        wait("the group's dead count", lambda: row_cells(
            '#cs-table tr.cs-row[data-group="parked"]')[6] == "0")

        # A reload renames payments to billing: the pickers follow, the open view with them.
        driver.find_element(By.ID, "tab-blocked").click()
        Select(driver.find_element(By.ID, "bk-pipeline")).select_by_value("payments")
        wait("acct-7 blocked", lambda: "payment.captured" in row_cells("#bk-table tr.bk-row")[2])
        write_config("billing")
        daemon.send_signal(signal.SIGHUP)
        wait("the pickers follow the rename", lambda: all(
            "billing" in options(p) and "payments" not in options(p)
            for p in ("bk-pipeline", "ls-pipeline", "dl-pipeline")))
        # (the page cannot know billing is payments renamed, and a reload may stop payments a
        # moment before billing starts: the view moves to a pipeline that exists and says why)
        wait("the page saying payments is gone", lambda: "payments" in text("msg")
             and "no longer" in text("msg"))
        Select(driver.find_element(By.ID, "bk-pipeline")).select_by_value("billing")
        wait("billing's URL", lambda: fragment() == "#blocked?pipeline=billing")
        wait("billing's blocked key", lambda: "payment.captured" in row_cells(
            "#bk-table tr.bk-row")[2])
        assert "404" not in text("msg"), text("msg")

        # Cross-site requests are refused even with the token.
        req = urllib.request.Request(base + "/api/dead/discard", method="POST",
                                     data=json.dumps({"pipeline": "orders", "ids": []}).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": "Bearer " + TOKEN,
                                              "Origin": "http://evil.example"})
        try:
            urllib.request.urlopen(req)
            raise AssertionError("a cross-site POST was accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 403, e.code
        print("dashboard_test: ok")
        return 0
    finally:
        if driver:
            driver.quit()
        Webhook.release.set()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        hook.shutdown()
        if os.environ.get("KEEP_WORK") != "1":
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # AssertionError, selenium's, a daemon that did not start
        import traceback
        traceback.print_exc(limit=3)
        print("dashboard_test: FAILED:", str(e).strip().splitlines()[0] if str(e).strip() else repr(e))
        sys.exit(1)
