// Dead letters of a consumer group as an operator sees them (issue 18 defect 7, issue 20 item 4;
// docs/cli.md "consumers", docs/dashboard.md): `outpost consumers dead` prints them in the shape
// of `outpost events dead` (the event: id, type, key, payload as JSON, headers; attempts,
// last_error, dead_at), takes the filters of `outpost events`, and names a group or id that does
// not exist (exit 1); the dashboard's API serves both kinds in that shape, pages through them,
// acts on a group's by filter, and tells "admin token required" from "wrong admin token". CLI
// processes and a daemon (`outpost run`) on SQLite files, with a webhook that refuses.

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cli_process.h"
#include "daemon_process.h"
#include "outpost/json.h"
#include "refusing_webhook.h"

namespace outpost::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// A log of three events, one line that is not an event and an event without id, as the file
// sink writes them (and a producer of its own may). The first payload has a number beyond 64
// bits: its digits must come out as they went in.
struct Log {
  std::vector<std::string> ids;
  static constexpr const char* kBigNumber = "12345678901234567890123";

  explicit Log(const std::string& path) {
    std::ofstream out(path);
    auto add = [&](Event e) {
      StoredEvent s;
      static_cast<Event&>(s) = std::move(e);
      ids.push_back(s.id.str());
      out << to_json(s) << "\n";
    };
    add(Event::make("order.placed", std::string("{\"amount\":") + kBigNumber + "}", "acct-1"));
    Event traced = Event::make("order.placed", "{\"n\":1}", "acct-2");
    traced.headers["trace"] = "t-1";
    add(traced);
    Event text = Event::make("user.created", "plain text", "user-9");
    text.headers[std::string(header::kContentType)] = std::string(kTextContentType);
    add(text);
    out << "{\"type\": broken\n";
    out << "{\"type\":\"note.added\",\"key\":\"n-1\",\"payload\":{\"x\":1}}\n";
  }
};

class ConsumersDeadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Log log(dir_ / "log.jsonl");
    ids_ = log.ids;
    auto r =
        run_cli({"consume", "--from", "file:" + dir_ / "log.jsonl", "--group", "g", "--checkpoint",
                 cp_, "--sink", hook_.url(), "--max-attempts", "1", "--backoff-base-ms", "1",
                 "--backoff-max-ms", "5", "--until-idle", "300", "--quiet"});
    ASSERT_EQ(r.code, 0) << r.all();
    ASSERT_EQ(dead().size(), 5u)
        << run_cli({"consumers", "--checkpoint", cp_, "dead", "--group", "g"}).all();
  }
  std::vector<json> dead(std::vector<std::string> more = {}) {
    std::vector<std::string> args{"consumers", "--checkpoint", cp_, "dead", "--group", "g"};
    args.insert(args.end(), more.begin(), more.end());
    auto r = run_cli(args);
    EXPECT_EQ(r.code, 0) << r.all();
    std::vector<json> out;
    for (const auto& line : lines_of(r.out)) out.push_back(json::parse(line));
    return out;
  }
  CliResult consumers(std::vector<std::string> args) {
    args.insert(args.begin(), {"consumers", "--checkpoint", cp_});
    return run_cli(args);
  }

  TempDir dir_;
  RefusingWebhook hook_;
  std::string cp_ = "sqlite:" + (dir_ / "cp.db");
  std::vector<std::string> ids_;
};

// One shape: a consumer dead letter is the event it carries (not its line as a string, without
// type), with the fields `outpost events dead` prints for a relay's dead letter.
TEST_F(ConsumersDeadTest, DeadLettersAreEventsInTheShapeOfEventsDead) {
  auto r = run_cli({"consumers", "--checkpoint", cp_, "dead", "--group", "g"});
  ASSERT_EQ(r.code, 0) << r.all();
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  // Oldest first: the line that is not an event was parked at once, the events after their
  // attempt. The payload's text as stored: every digit of the big number.
  EXPECT_NE(lines[1].find(std::string("\"payload\":{\"amount\":") + Log::kBigNumber + "}"),
            std::string::npos)
      << lines[1];
  auto d = json::parse(lines[1]);
  EXPECT_EQ(d["id"], ids_[0]);
  EXPECT_EQ(d["type"], "order.placed");
  EXPECT_EQ(d["key"], "acct-1");
  ASSERT_TRUE(d["payload"].is_object()) << d;
  EXPECT_TRUE(d["payload"].contains("amount")) << d;
  EXPECT_TRUE(d["headers"].is_object()) << d;
  EXPECT_EQ(d["attempts"], 1);
  EXPECT_NE(d["last_error"].get<std::string>().find("422"), std::string::npos) << d;
  EXPECT_TRUE(d["occurred_at"].is_string()) << d;
  EXPECT_TRUE(d["dead_at"].is_string()) << d;
  // The consumer's own fields, and the documented names of earlier versions.
  EXPECT_TRUE(d["row"].is_number_integer()) << d;
  EXPECT_EQ(d["group"], "g");
  EXPECT_FALSE(d["position"].get<std::string>().empty()) << d;
  EXPECT_EQ(d["state"], "dead");
  EXPECT_EQ(d["event_id"], ids_[0]);
  EXPECT_EQ(d["error"], d["last_error"]);
  auto traced = json::parse(lines[2]);
  EXPECT_EQ(traced["headers"]["trace"], "t-1") << traced;
  EXPECT_EQ(traced["payload"]["n"], 1) << traced;
  auto text = json::parse(lines[3]);
  EXPECT_EQ(text["type"], "user.created");
  EXPECT_EQ(text["payload"], "plain text") << text;
  // A line that is not an event: no type or payload, the message as read, no id.
  auto torn = json::parse(lines[0]);
  EXPECT_FALSE(torn.contains("type")) << torn;
  EXPECT_TRUE(torn["id"].is_null()) << torn;
  EXPECT_EQ(torn["raw"], "{\"type\": broken") << torn;
  EXPECT_EQ(torn["state"], "dead");
  // An event without id: the event, with a null id.
  auto anonymous = json::parse(lines[4]);
  EXPECT_TRUE(anonymous["id"].is_null()) << anonymous;
  EXPECT_EQ(anonymous["event_id"], "") << anonymous;
  EXPECT_EQ(anonymous["type"], "note.added") << anonymous;
  EXPECT_EQ(anonymous["payload"]["x"], 1) << anonymous;

  // The same event dead-lettered by a relay: `events dead` prints no field the consumer's lacks.
  const std::string store = "sqlite:" + (dir_ / "outbox.db");
  ASSERT_EQ(run_cli({"emit", "--store", store, "--type", "order.placed", "--key", "acct-1",
                     "--payload", "{\"amount\":1}"})
                .code,
            0);
  r = run_cli({"relay", "--store", store, "--sink", hook_.url(), "--max-attempts", "1",
               "--until-empty", "--quiet"});
  ASSERT_EQ(r.code, 3) << r.all();  // --until-empty that dead-lettered events (docs/cli.md)
  r = run_cli({"events", "--store", store, "dead"});
  ASSERT_EQ(lines_of(r.out).size(), 1u) << r.all();
  auto relay_dead = json::parse(lines_of(r.out)[0]);
  for (auto it = relay_dead.begin(); it != relay_dead.end(); ++it)
    EXPECT_TRUE(d.contains(it.key()))
        << "the consumer's dead letter lacks " << it.key() << ": " << d;
}

// The filters of `outpost events` (issue 20 item 4), and a group or id that does not exist is
// exit 1 naming it.
TEST_F(ConsumersDeadTest, FiltersAsOutpostEventsAndMissingGroupsAndIdsAreNamed) {
  EXPECT_EQ(dead({"--type", "order.placed"}).size(), 2u);
  EXPECT_EQ(dead({"--key", "acct"}).size(), 2u);
  EXPECT_EQ(dead({"--error", "no such account"}).size(), 4u);
  EXPECT_EQ(dead({"--older-than", "1h"}).size(), 0u);
  EXPECT_EQ(dead({"--older-than", "0s"}).size(), 5u);
  auto newest = dead({"--newest-first", "--limit", "1"});
  ASSERT_EQ(newest.size(), 1u);
  EXPECT_EQ(newest[0]["type"], "note.added") << newest[0];
  EXPECT_EQ(dead({"--type", "order.placed", "--key", "acct-2"}).size(), 1u);

  // Usage errors: exit 2 before anything is opened.
  auto r = consumers({"retry", "--group", "g", "--all", "--type", "x"});
  EXPECT_EQ(r.code, 2) << r.all();
  r = consumers({"dead", "--group", "g", "--older-than", "5parsecs"});
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("--older-than"), std::string::npos) << r.err;

  // A group that does not exist: named, exit 1 (not an empty list).
  for (auto op : {std::vector<std::string>{"dead", "--group", "nope"},
                  std::vector<std::string>{"retry", "--group", "nope", "--all"},
                  std::vector<std::string>{"discard", "--group", "nope", "--type", "t"}}) {
    r = consumers(op);
    EXPECT_EQ(r.code, 1) << op[0] << ": " << r.all();
    EXPECT_NE(r.err.find("'nope'"), std::string::npos) << r.err;
  }
  // Ids that are no dead letter of the group: named, nothing changed.
  const std::string row = std::to_string(dead()[0]["row"].get<int>());
  const std::string absent = "0190b6a2-2b5e-7c6e-9d5c-4a1e2f3b4c5d";
  r = consumers({"discard", "--group", "g", row, "999999", absent});
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("999999"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(absent), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nothing was changed"), std::string::npos) << r.err;
  EXPECT_EQ(dead().size(), 5u);

  // Retry and discard by filter, --verbose naming the rows.
  r = consumers({"retry", "--group", "g", "--type", "user.created", "--verbose"});
  ASSERT_EQ(r.code, 0) << r.all();
  auto out = lines_of(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  EXPECT_EQ(out[1], "retried 1 dead letter of group 'g'");
  auto retried = dead({"--type", "user.created"});
  ASSERT_EQ(retried.size(), 1u);
  EXPECT_EQ(std::to_string(retried[0]["row"].get<int>()), out[0]);
  EXPECT_EQ(retried[0]["state"], "retry");
  r = consumers({"discard", "--group", "g", "--key", "acct-2"});
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(lines_of(r.out), std::vector<std::string>{"discarded 1 dead letter of group 'g'"});
  EXPECT_EQ(dead({"--key", "acct"}).size(), 1u);
  // By event id, as before.
  r = consumers({"discard", "--group", "g", ids_[0]});
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(dead().size(), 3u);
}

// The dashboard's API: a group's dead letters are events, both kinds page, a group's act by
// filter with the count confirmed, and a missing token is told from a wrong one.
class DashboardApiTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (daemon_) {
      daemon_->signal(SIGTERM);
      EXPECT_EQ(daemon_->wait(60s), 0) << read_file(log_);
    }
  }
  int start() {
    const std::string db = dir_ / "orders.db";
    for (int i = 0; i < 5; ++i) {
      auto r = run_cli({"emit", "--store", "sqlite:" + db, "--type", "order.placed", "--key",
                        "k" + std::to_string(i), "--payload", "{}"});
      EXPECT_EQ(r.code, 0) << r.err;
    }
    Log log(dir_ / "log.jsonl");
    const std::string config = dir_ / "outpost.toml";
    std::ofstream(config) << "[http]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"tok\"\n\n"
                          << "[[relay]]\nname = \"orders\"\nstore = \"sqlite:" << db
                          << "\"\nsink = \"" << hook_.url()
                          << "\"\nmax_attempts = 1\nquiet = true\n\n"
                          << "[[consume]]\nname = \"parked\"\nfrom = \"file:" << dir_ / "log.jsonl"
                          << "\"\ngroup = \"parked\"\ncheckpoint = \"sqlite:" << dir_ / "cp.db"
                          << "\"\nsink = \"" << hook_.url() << "\"\nmax_attempts = 1\n";
    log_ = dir_ / "run.log";
    daemon_ =
        std::make_unique<CliProcess>(std::vector<std::string>{"run", "--config", config}, log_);
    return served_port(log_, 60s);
  }
  TempDir dir_;
  RefusingWebhook hook_;
  std::string log_;
  std::unique_ptr<CliProcess> daemon_;
};

TEST_F(DashboardApiTest, DeadLettersOfBothKindsAreEventsThatPageAndActByFilter) {
  int port = start();
  ASSERT_GT(port, 0) << read_file(log_);
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto get = [&](const std::string& path) {
    auto r = client.Get(path);
    return r && r->status == 200 ? json::parse(r->body) : json();
  };
  ASSERT_TRUE(eventually([&] {
    return get("/api/dead?pipeline=orders").value("matching", 0) == 5 &&
           get("/api/consumer/dead?pipeline=parked").value("matching", 0) == 5;
  })) << read_file(log_);

  // Pages: offset + limit, every dead letter once.
  std::set<std::string> seen;
  for (int offset : {0, 2, 4}) {
    auto page = get("/api/dead?pipeline=orders&limit=2&offset=" + std::to_string(offset));
    EXPECT_EQ(page["matching"], 5);
    EXPECT_EQ(page["offset"], offset);
    ASSERT_EQ(page["events"].size(), offset == 4 ? 1u : 2u) << page;
    for (const auto& e : page["events"]) seen.insert(e["id"].get<std::string>());
  }
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(get("/api/dead?pipeline=orders&offset=5")["events"].size(), 0u);
  auto bad = client.Get("/api/dead?pipeline=orders&offset=x");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);

  // A group's dead letters: events with type and JSON payload, on either route, filtered and
  // paged as a relay's.
  const auto group = get("/api/consumer/dead?pipeline=parked");
  ASSERT_EQ(group["events"].size(), 5u) << group;
  const auto& first = group["events"][1];  // [0]: the line that is not an event, parked at once
  EXPECT_EQ(first.value("type", ""), "order.placed") << group;
  EXPECT_TRUE(first.contains("payload") && first["payload"].is_object()) << group;
  EXPECT_EQ(first.value("group", ""), "parked");
  EXPECT_EQ(get("/api/dead?pipeline=parked"), group);
  auto placed = get("/api/dead?pipeline=parked&type=order.placed&limit=1&offset=1");
  EXPECT_EQ(placed["matching"], 2);
  ASSERT_EQ(placed["events"].size(), 1u);
  EXPECT_EQ(placed["events"][0]["key"], "acct-2");

  // Tokens: none given and a wrong one are told apart (both 401, RFC 6750).
  const std::string body = R"({"pipeline":"parked","ids":[1]})";
  auto r = client.Post("/api/consumer/dead/retry", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["code"], "token_required") << r->body;
  EXPECT_NE(r->body.find("admin token required"), std::string::npos) << r->body;
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer realm=\"outpost\"");
  r = client.Post("/api/consumer/dead/retry", {{"Authorization", "Bearer "}}, body,
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["code"], "token_required") << r->body;
  r = client.Post("/api/consumer/dead/retry", {{"Authorization", "Bearer nope"}}, body,
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["code"], "token_wrong") << r->body;
  EXPECT_NE(r->body.find("wrong admin token"), std::string::npos) << r->body;
  EXPECT_NE(r->get_header_value("WWW-Authenticate").find("invalid_token"), std::string::npos);

  // A group's dead letters by filter, only with the count the operator confirmed.
  const httplib::Headers auth{{"Authorization", "Bearer tok"}};
  r = client.Post("/api/consumer/dead/discard", auth,
                  R"({"pipeline":"parked","filter":{"type":"order.placed"},"expect":3})",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 409) << r->body;
  EXPECT_EQ(json::parse(r->body)["matching"], 2) << r->body;
  r = client.Post("/api/consumer/dead/discard", auth,
                  R"({"pipeline":"parked","filter":{"type":"order.placed"},"expect":2})",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["discarded"], 2) << r->body;
  EXPECT_EQ(get("/api/consumer/dead?pipeline=parked")["matching"], 3);
  EXPECT_NE(read_file(log_).find("[parked] dashboard: consumer dead letters: discard by filter "
                                 "{\"type\":\"order.placed\"}: discarded 2 (from 127.0.0.1)"),
            std::string::npos)
      << read_file(log_);
}

// A misspelt filter key or query parameter was ignored, so the filter matched every dead letter:
// the preview counted them all and a discard "by filter" with that count deleted them all
// (operator finding F8). Unknown parameters and keys are a 400 naming them, nothing is touched.
TEST_F(DashboardApiTest, UnknownParametersAndFilterKeysAreRefusedNotIgnored) {
  int port = start();
  ASSERT_GT(port, 0) << read_file(log_);
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto matching = [&](const std::string& path) {
    auto r = client.Get(path);
    return r && r->status == 200 ? json::parse(r->body).value("matching", -1) : -1;
  };
  ASSERT_TRUE(eventually([&] { return matching("/api/dead?pipeline=orders") == 5; }))
      << read_file(log_);

  for (const char* path : {"/api/dead?pipeline=orders&tpye=x", "/api/dead?pipeline=orders&bogus=1",
                           "/api/consumer/dead?pipeline=parked&kye=k1"}) {
    auto r = client.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << path << ": " << r->body;
    EXPECT_NE(r->body.find("unknown"), std::string::npos) << r->body;
  }
  const httplib::Headers auth{{"Authorization", "Bearer tok"}};
  for (const char* body :
       {R"({"pipeline":"orders","filter":{"tpye":"x"},"expect":5})",
        R"({"pipeline":"orders","filter":{"type":"order.placed"},"expect":5,"bogus":1})"}) {
    auto r = client.Post("/api/dead/discard", auth, body, "application/json");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, 400) << body << ": " << r->body;
    EXPECT_NE(r->body.find("unknown"), std::string::npos) << r->body;
  }
  EXPECT_EQ(matching("/api/dead?pipeline=orders"), 5) << "a refused discard deleted dead letters";
}

// The blocked keys and leases views (docs/dashboard.md) read a relay pipeline's store; they name
// a pipeline that has none (a consume pipeline, or no such name: 404) and a malformed limit (400).
TEST_F(DashboardApiTest, BlockedKeysAndLeasesAnswerForARelayPipelineOnly) {
  int port = start();
  ASSERT_GT(port, 0) << read_file(log_);
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto status = [&](const std::string& path) {
    auto r = client.Get(path);
    return r ? r->status : -1;
  };
  ASSERT_TRUE(eventually([&] { return status("/api/blocked?pipeline=orders") == 200; }))
      << read_file(log_);
  auto r = client.Get("/api/blocked?pipeline=orders&limit=5");
  ASSERT_TRUE(r);
  auto blocked = json::parse(r->body);
  EXPECT_EQ(blocked["ordered"], true) << r->body;
  EXPECT_TRUE(blocked["keys"].is_array()) << r->body;
  r = client.Get("/api/leases?pipeline=orders");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto leases = json::parse(r->body);
  EXPECT_GT(leases.value("lease_ms", 0), 0) << r->body;
  EXPECT_TRUE(leases["events"].is_array() && leases["holders"].is_array()) << r->body;
  EXPECT_TRUE(leases["leased"].is_number_integer()) << r->body;
  for (const char* route : {"/api/blocked", "/api/leases"}) {
    EXPECT_EQ(status(std::string(route) + "?pipeline=parked"), 404) << route;
    EXPECT_EQ(status(std::string(route) + "?pipeline=nope"), 404) << route;
    EXPECT_EQ(status(std::string(route) + "?pipeline=orders&limit=x"), 400) << route;
  }
}

// limit= and offset= of every list route: out of range, negative or not a number is a 400 naming
// the parameter and its range, in the words of the CLI's --limit (docs/cli.md, "Integer flags");
// it was clamped in silence (limit=0 gave 1, limit=99999 gave 10000 or 1000, offset=-1 a 400
// that did not say the range), and the routes worded their errors differently.
TEST_F(DashboardApiTest, LimitAndOffsetOutOfRangeAreRefusedNamingTheRange) {
  int port = start();
  ASSERT_GT(port, 0) << read_file(log_);
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  ASSERT_TRUE(eventually([&] {
    auto r = client.Get("/api/dead?pipeline=orders");
    return r && r->status == 200 && json::parse(r->body).value("matching", -1) == 5;
  })) << read_file(log_);
  struct Case {
    std::string route, param, value, range;
  };
  std::vector<Case> cases;
  for (const char* route : {"/api/dead?pipeline=orders", "/api/consumer/dead?pipeline=parked"}) {
    for (const char* v : {"0", "-1", "x", "", "10001", "1.5", "99999999999999999999"})
      cases.push_back({route, "limit", v, "from 1 to 10000"});
    for (const char* v : {"-1", "x", "10001", "+1"})
      cases.push_back({route, "offset", v, "from 0 to 10000"});
  }
  for (const char* route : {"/api/blocked?pipeline=orders", "/api/leases?pipeline=orders"})
    for (const char* v : {"0", "-1", "x", "1001", " 5"})
      cases.push_back({route, "limit", v, "from 1 to 1000"});
  for (const auto& c : cases) {
    const std::string path =
        c.route + "&" + c.param + "=" + httplib::detail::encode_query_param(c.value);
    auto r = client.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << path << ": " << r->body;
    auto body = json::parse(r->body, nullptr, false);
    EXPECT_EQ(body.value("error", ""),
              c.param + " must be a whole number " + c.range + ", got '" + c.value + "'")
        << path;
  }
  // The bounds themselves are taken.
  for (const char* path :
       {"/api/dead?pipeline=orders&limit=1&offset=0", "/api/dead?pipeline=orders&limit=10000",
        "/api/dead?pipeline=orders&offset=10000", "/api/blocked?pipeline=orders&limit=1000",
        "/api/leases?pipeline=orders&limit=1"}) {
    auto r = client.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
  }
}

// The consumers page's Move and Delete (issue 20 item 3; docs/dashboard.md): the admin token as
// for every change, bad input named (400), a move the running consumer follows (it reads the
// log again and, with reprocess, parks every message again), logged with the remote address; a
// delete needs the group's name typed again and waits until the pipeline no longer runs.
TEST_F(DashboardApiTest, AConsumeGroupIsMovedAndItsRunningConsumerFollows) {
  int port = start();
  ASSERT_GT(port, 0) << read_file(log_);
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(30, 0);
  auto get = [&](const std::string& path) {
    auto r = client.Get(path);
    return r && r->status == 200 ? json::parse(r->body) : json();
  };
  auto group = [&] {  // the parked pipeline's group, {} until the daemon lists it
    auto o = get("/api/overview");
    if (o.is_object() && o["pipelines"].is_array())
      for (const auto& p : o["pipelines"])
        if (p.value("name", "") == "parked" && p["consumer"].is_object()) return p["consumer"];
    return json::object();
  };
  auto dead = [&] {
    auto d = get("/api/consumer/dead?pipeline=parked");
    return d.is_object() ? d.value("matching", 0) : -1;
  };
  const std::string end = std::to_string(std::filesystem::file_size(dir_ / "log.jsonl"));
  ASSERT_TRUE(eventually([&] {
    return dead() == 5 && group().value("position", "").rfind(end + "@", 0) == 0;
  })) << read_file(log_);

  const httplib::Headers auth{{"Authorization", "Bearer tok"}};
  auto post = [&](const std::string& path, const std::string& body, bool with_token = true) {
    auto r = with_token ? client.Post(path, auth, body, "application/json")
                        : client.Post(path, body, "application/json");
    EXPECT_TRUE(r) << path;
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
  };
  auto [status, body] =
      post("/api/consumer/seek", R"({"pipeline":"parked","to":"beginning"})", false);
  EXPECT_EQ(status, 401) << body;
  std::tie(status, body) = post("/api/consumer/seek", R"({"pipeline":"orders","to":"end"})");
  EXPECT_EQ(status, 404) << body;
  std::tie(status, body) = post("/api/consumer/seek", R"({"pipeline":"parked"})");
  EXPECT_EQ(status, 400) << body;
  std::tie(status, body) = post("/api/consumer/seek", R"({"pipeline":"parked","to":"12x"})");
  EXPECT_EQ(status, 400) << body;
  EXPECT_NE(body.find("12x"), std::string::npos) << body;
  EXPECT_EQ(dead(), 5);

  std::tie(status, body) =
      post("/api/consumer/seek", R"({"pipeline":"parked","to":"beginning","reprocess":true})");
  ASSERT_EQ(status, 200) << body;
  auto moved = json::parse(body);
  EXPECT_EQ(moved["group"], "parked");
  EXPECT_EQ(moved["from"].get<std::string>().rfind(end + "@", 0), 0u) << body;
  EXPECT_EQ(moved["to"].get<std::string>().rfind("0@", 0), 0u) << body;
  // The running consumer reads the log again and parks each message a second time.
  EXPECT_TRUE(eventually([&] { return dead() == 10; })) << read_file(log_);
  const std::string log = read_file(log_);
  EXPECT_NE(log.find("[parked] dashboard: consumer group 'parked': seek to beginning with "
                     "reprocess: moved from " +
                     moved["from"].get<std::string>() + " to " + moved["to"].get<std::string>() +
                     " (from 127.0.0.1)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("moved by an operator"), std::string::npos) << log;

  std::tie(status, body) = post("/api/consumer/delete", R"({"pipeline":"parked","group":"nope"})");
  EXPECT_EQ(status, 400) << body;
  std::tie(status, body) =
      post("/api/consumer/delete", R"({"pipeline":"parked","group":"parked"})");
  EXPECT_EQ(status, 409) << body;
  EXPECT_NE(body.find("is running"), std::string::npos) << body;
  EXPECT_EQ(dead(), 10);
}

}  // namespace
}  // namespace outpost::testing
