// open_store / open_sink: scheme dispatch, the postgres alias, and errors that list what this
// build supports without echoing secrets.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "outpost/error.h"
#include "outpost/factory.h"

namespace outpost {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no ConfigError";
}

TEST(Factory, MemoryStoreAndFileSinkAreAlwaysBuilt) {
  EXPECT_TRUE(contains(store_schemes(), "memory"));
  EXPECT_TRUE(contains(sink_schemes(), "file"));
  auto store = open_store("memory:");
  ASSERT_TRUE(store);
  EXPECT_EQ(store->stats().pending, 0);
  auto sink = open_sink("file:-");
  ASSERT_TRUE(sink);
  EXPECT_EQ(sink->name(), "file");
}

TEST(Factory, SchemesAreCaseInsensitive) {
  auto sink = open_sink("FILE:-");
  EXPECT_EQ(sink->name(), "file");
  if (contains(sink_schemes(), "http")) {
    EXPECT_EQ(open_sink("HTTP://127.0.0.1:9/hook")->name(), "http");
    EXPECT_EQ(open_sink("https://127.0.0.1:9/hook")->name(), "http");
  }
}

// A webhook URL that would fail or mislabel every request is refused before anything is sent
// (docs/sinks_file_http.md): what curl cannot send, and headers the sink writes itself or that
// frame the request; headers a user may set stay accepted.
TEST(Factory, AWebhookUrlThatBreaksEveryRequestIsRefused) {
  if (!contains(sink_schemes(), "http")) GTEST_SKIP() << "no HTTP sink in this build";
  for (const char* url :
       {"http://127.0.0.1:9/a b", "http://127.0.0.1:9/a\tb", "http://127.0.0.1:9/h?x=a b"}) {
    std::string msg = config_error([&] { check_sink_url(url); });
    EXPECT_NE(msg.find("bad URL"), std::string::npos) << url << ": " << msg;
    EXPECT_NE(msg.find("percent-encode"), std::string::npos) << url << ": " << msg;
  }
  for (const char* name :
       {"Idempotency-Key", "idempotency-key", "ce-id", "CE-Type", "outpost-key-seq", "traceparent",
        "Content-Length", "Transfer-Encoding", "Connection", "Expect"}) {
    const std::string url = std::string("http://127.0.0.1:9/h?header.") + name + "=x";
    std::string msg = config_error([&] { check_sink_url(url); });
    EXPECT_NE(msg.find(std::string("'header.") + name + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("writes itself"), std::string::npos) << msg;
  }
  for (const char* url :
       {"http://127.0.0.1:9/a%20b?x=a%20b", "http://127.0.0.1:9/h?header.Host=api.example",
        "http://127.0.0.1:9/h?header.Content-Type=text/plain",
        "http://127.0.0.1:9/h?header.Authorization=Bearer%20t&header.cex=1"})
    EXPECT_EQ(config_error([&] { check_sink_url(url); }), "no ConfigError") << url;
}

TEST(Factory, PostgresIsAnAliasOfPostgresql) {
  EXPECT_EQ(contains(store_schemes(), "postgres"), contains(store_schemes(), "postgresql"));
}

TEST(Factory, UnsupportedSchemeListsWhatThisBuildSupports) {
  std::string msg = config_error([] { open_store("mongodb://h/db"); });
  EXPECT_NE(msg.find("'mongodb:'"), std::string::npos) << msg;
  for (const auto& s : store_schemes()) EXPECT_NE(msg.find(s + ":"), std::string::npos) << msg;

  msg = config_error([] { open_sink("amqp://h/q"); });
  EXPECT_NE(msg.find("'amqp:'"), std::string::npos) << msg;
  for (const auto& s : sink_schemes()) EXPECT_NE(msg.find(s + ":"), std::string::npos) << msg;

  // A sink URL given as a store (a common mix-up) names the scheme, too.
  msg = config_error([] { open_store("file:/tmp/x"); });
  EXPECT_NE(msg.find("'file:'"), std::string::npos) << msg;
}

TEST(Factory, MissingSchemeIsAConfigError) {
  EXPECT_NE(config_error([] { open_store("/tmp/outbox.db"); }).find("missing scheme"),
            std::string::npos);
  EXPECT_NE(config_error([] { open_sink(""); }).find("missing scheme"), std::string::npos);
}

TEST(Factory, ErrorsNeverEchoAPassword) {
  std::string msg = config_error([] { open_store("nosuch://user:hunter2@host/db"); });
  EXPECT_EQ(msg.find("hunter2"), std::string::npos) << msg;
}

TEST(Factory, BackendErrorsPassThrough) {
  // The backend parses its own URL: a typo in a parameter is named.
  std::string msg = config_error([] { open_store("memory:?archiv=1"); });
  EXPECT_NE(msg.find("archiv"), std::string::npos) << msg;
}

}  // namespace
}  // namespace outpost
