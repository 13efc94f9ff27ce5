// Store/sink URL parsing (core/url.h): both shapes, hosts and ports, query parameters with typed
// accessors, typos rejected by name, and passwords kept out of messages.

#include <gtest/gtest.h>

#include "core/url.h"
#include "outpost/error.h"

namespace outpost::core {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(UrlTest, OpaqueForms) {
  auto a = Url::parse("sqlite:/var/lib/app.db?table=events");
  EXPECT_EQ(a.scheme(), "sqlite");
  EXPECT_FALSE(a.hierarchical());
  EXPECT_EQ(a.path(), "/var/lib/app.db");
  EXPECT_EQ(a.param("table"), "events");
  auto m = Url::parse("sqlite::memory:");
  EXPECT_EQ(m.path(), ":memory:");
  auto rel = Url::parse("file:out/events%20log.jsonl");
  EXPECT_EQ(rel.path(), "out/events log.jsonl");
  auto mem = Url::parse("MEMORY:");
  EXPECT_EQ(mem.scheme(), "memory");
  EXPECT_TRUE(mem.path().empty());
}

TEST(UrlTest, HierarchicalFormsWithUsersHostsAndPorts) {
  auto pg = Url::parse("postgresql://app:s%40cret@db.local:5433/orders?table=outbox");
  EXPECT_TRUE(pg.hierarchical());
  EXPECT_EQ(pg.user(), "app");
  EXPECT_EQ(pg.password(), "s@cret");
  ASSERT_EQ(pg.hosts().size(), 1u);
  EXPECT_EQ(pg.hosts()[0].host, "db.local");
  EXPECT_EQ(pg.hosts()[0].port, 5433);
  EXPECT_EQ(pg.path(), "orders");

  auto k = Url::parse("kafka://127.0.0.1:9092,127.0.0.1,[::1]:9094/topic");
  ASSERT_EQ(k.hosts().size(), 3u);
  EXPECT_EQ(k.hosts()[1].port, 0) << "not given";
  EXPECT_EQ(k.hosts()[2].host, "::1");
  EXPECT_EQ(k.host_list(9092), "127.0.0.1:9092,127.0.0.1:9092,[::1]:9094");
  EXPECT_EQ(k.path(), "topic");
}

TEST(UrlTest, BadPartsAreNamed) {
  EXPECT_NE(error_of([] { Url::parse("no-scheme-here"); }).find("scheme"), std::string::npos);
  EXPECT_NE(error_of([] { Url::parse("redis://host:99999/0"); }).find("port '99999'"),
            std::string::npos);
  EXPECT_NE(error_of([] { Url::parse("redis://host:abc/0"); }).find("port 'abc'"),
            std::string::npos);
  EXPECT_NE(error_of([] { Url::parse("redis://:6379/0"); }).find("empty host"), std::string::npos);
  EXPECT_NE(error_of([] { Url::parse("sqlite:x.db?=1"); }).find("empty name"), std::string::npos);
}

TEST(UrlTest, TypedParametersAndUnknownOnesRejected) {
  auto u = Url::parse("redis-stream://h:1/s?maxlen=1000&approx=false&flag&mode=fast");
  EXPECT_EQ(u.int_param("maxlen", 1, 1'000'000), 1000);
  EXPECT_EQ(u.bool_param("approx"), false);
  EXPECT_EQ(u.bool_param("flag"), true) << "a bare flag means true";
  EXPECT_EQ(u.int_param("missing", 0, 1), std::nullopt);
  std::string e = error_of([&] { u.reject_unknown(); });
  EXPECT_NE(e.find("unknown parameter 'mode'"), std::string::npos) << e;
  EXPECT_NE(e.find("maxlen"), std::string::npos) << "lists the known ones: " << e;
  u.param("mode");
  EXPECT_NO_THROW(u.reject_unknown());

  auto bad = Url::parse("x:y?batch=0&on=maybe");
  EXPECT_NE(error_of([&] { bad.int_param("batch", 1, 10); }).find("'batch'"), std::string::npos);
  EXPECT_NE(error_of([&] { bad.bool_param("on"); }).find("'on'"), std::string::npos);
  EXPECT_NE(error_of([] { Url::parse("memory:?typo=1").reject_unknown(); }).find("'typo'"),
            std::string::npos);
}

TEST(UrlTest, PasswordIsRedactedInMessages) {
  auto u = Url::parse("postgresql://app:hunter2@db:5432/x?batch=oops");
  EXPECT_EQ(u.redacted(), "postgresql://app:***@db:5432/x?batch=oops");
  std::string e = error_of([&] { u.int_param("batch", 1, 10); });
  EXPECT_EQ(e.find("hunter2"), std::string::npos) << e;
  EXPECT_EQ(Url::parse("redis://h:1/0").redacted(), "redis://h:1/0");
}

}  // namespace
}  // namespace outpost::core
