// `outpost run` whose every pipeline ended by itself (until_empty) exits as its pipelines would
// as their own commands (docs/operations.md): 1 when one stopped by an error, else 3 when an
// until_empty relay dead-lettered events, else 0; so a batch job moved from `outpost relay
// --until-empty` to a config still tells "all delivered" from "some given up".

#include <gtest/gtest.h>
#include <httplib.h>
#include <sqlite3.h>

#include <fstream>
#include <thread>

#include "cli_process.h"

namespace {

using namespace outpost::testing;
using namespace std::chrono_literals;

// A webhook on 127.0.0.1 that refuses every event (HTTP 400: the event's fault, an attempt).
class RefusingWebhook {
 public:
  RefusingWebhook() {
    server_.Post("/hook",
                 [](const httplib::Request&, httplib::Response& res) { res.status = 400; });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~RefusingWebhook() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

void emit(const std::string& db) {
  auto r =
      run_cli({"emit", "--store", "sqlite:" + db, "--type", "t", "--key", "k", "--payload", "{}"});
  ASSERT_EQ(r.code, 0) << r.all();
}

std::string relay_table(const std::string& name, const std::string& db, const std::string& sink,
                        const std::string& extra = "") {
  return "[[relay]]\nname = \"" + name + "\"\nstore = \"sqlite:" + db + "\"\nsink = \"" + sink +
         "\"\nuntil_empty = true\n" + extra + "\n";
}

CliResult run_config(const TempDir& dir, const std::string& text) {
  const std::string path = dir / "d.toml";
  std::ofstream(path) << text;
  return run_cli({"run", "--config", path}, {}, 120s);
}

}  // namespace

TEST(DaemonExit, EveryPipelineEndedWithEverythingDeliveredIsZero) {
  TempDir dir;
  emit(dir / "a.db");
  emit(dir / "b.db");
  auto r = run_config(dir, relay_table("a", dir / "a.db", "file:" + dir / "a.jsonl") +
                               relay_table("b", dir / "b.db", "file:" + dir / "b.jsonl"));
  EXPECT_EQ(r.code, 0) << r.all();
}

TEST(DaemonExit, AnUntilEmptyRelayThatDeadLetteredMakesItThree) {
  TempDir dir;
  RefusingWebhook hook;
  emit(dir / "a.db");
  emit(dir / "b.db");
  auto r =
      run_config(dir, relay_table("ok", dir / "a.db", "file:" + dir / "a.jsonl") +
                          relay_table("refused", dir / "b.db", hook.url(), "max_attempts = 1"));
  EXPECT_EQ(r.code, 3) << r.all();
  EXPECT_NE(r.all().find("dead 1"), std::string::npos) << r.all();
}

TEST(DaemonExit, APipelineStoppedByAnErrorMakesItOne) {
  TempDir dir;
  RefusingWebhook hook;
  emit(dir / "a.db");
  emit(dir / "b.db");
  emit(dir / "c.db");
  // b's only row cannot be read (docs/emit-contract.md: headers not a JSON object): that relay
  // stops by an error, as `outpost relay` exits 1 on it.
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "b.db").c_str(), &h), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(h, "UPDATE outbox_body SET headers = 'not json'", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(h);
  auto r =
      run_config(dir, relay_table("ok", dir / "a.db", "file:" + dir / "a.jsonl") +
                          relay_table("corrupt", dir / "b.db", "file:" + dir / "b.jsonl") +
                          relay_table("refused", dir / "c.db", hook.url(), "max_attempts = 1"));
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.all().find("[corrupt] stopped by an error"), std::string::npos) << r.all();
}
