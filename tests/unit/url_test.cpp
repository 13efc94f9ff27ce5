// Store/sink URL parsing (core/url.h): both shapes, hosts and ports, query parameters with typed
// accessors, typos rejected by name, and passwords kept out of messages.

#include <gtest/gtest.h>

#include "core/redact.h"
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

// Found by trying the CLI: `sqlite:x.db?table=a&table=b` wrote table b, silently. A parameter
// outpost reads may be given once; a webhook's own query (passed through) may repeat names.
TEST(UrlTest, AParameterGivenTwiceIsRefused) {
  auto u = Url::parse("sqlite:/tmp/x.db?table=a&table=b&archive=1");
  std::string e = error_of([&] { u.param("table"); });
  EXPECT_NE(e.find("parameter 'table' is given more than once"), std::string::npos) << e;
  EXPECT_EQ(u.bool_param("archive"), true);
  auto pass = Url::parse("https://h/x?tag=a&tag=b");
  EXPECT_EQ(pass.query().size(), 2u);
}

// what() is a C string: a NUL in a message cut it off before what is wrong was said.
TEST(UrlTest, ANulInAMessageIsShownNotCutOff) {
  const char text[] = "prefix '\0x' is not allowed";
  ConfigError e(std::string(text, sizeof text - 1), "redis");
  EXPECT_EQ(std::string(e.what()), "prefix '\\x00x' is not allowed");
}

TEST(UrlTest, PasswordIsRedactedInMessages) {
  auto u = Url::parse("postgresql://app:hunter2@db:5432/x?batch=oops");
  EXPECT_EQ(u.redacted(), "postgresql://app:***@db:5432/x?batch=oops");
  std::string e = error_of([&] { u.int_param("batch", 1, 10); });
  EXPECT_EQ(e.find("hunter2"), std::string::npos) << e;
  EXPECT_EQ(Url::parse("redis://h:1/0").redacted(), "redis://h:1/0");
}

// The one redaction rule (core/redact.h) over every scheme: userinfo passwords, a userinfo
// without a colon (a password for everything but PostgreSQL, where it is the role), and every
// parameter whose name says it is a secret.
TEST(RedactTest, EverySchemeHidesItsSecrets) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"sqlite:/var/x.db?password=pw1&table=t", "sqlite:/var/x.db?password=***&table=t"},
      {"postgresql://app:pw1@db:5432/x", "postgresql://app:***@db:5432/x"},
      {"postgres://app@db/x?password=pw1", "postgres://app@db/x?password=***"},
      {"redis://pw1@h:6379/0", "redis://***@h:6379/0"},
      {"redis://user:pw1@h:6379/0?prefix=p", "redis://user:***@h:6379/0?prefix=p"},
      {"redis-stream://pw1@h/s?maxlen=5", "redis-stream://***@h/s?maxlen=5"},
      {"memory:?token=pw1", "memory:?token=***"},
      {"file:/tmp/o.jsonl?secret=pw1", "file:/tmp/o.jsonl?secret=***"},
      {"http://u:pw1@h/hook?api_key=pw2&x=1", "http://u:***@h/hook?api_key=***&x=1"},
      {"https://tok@h/hook?header.Authorization=Bearer%20pw1",
       "https://***@h/hook?header.Authorization=***"},
      {"kafka://b:9092/t?sasl.username=u&sasl.password=pw1&ssl.key.password=pw2",
       "kafka://b:9092/t?sasl.username=u&sasl.password=***&ssl.key.password=***"},
      {"kafka://b/t?sasl.oauthbearer.config=principal%3Dpw1",
       "kafka://b/t?sasl.oauthbearer.config=***"},
      {"nats://tok@h:4222/s?stream=S", "nats://***@h:4222/s?stream=S"},
      {"nats://u:pw1@h/s?stream=S&client_secret=pw2",
       "nats://u:***@h/s?stream=S&client_secret=***"},
      {"amqp://u:pw1@h/vhost", "amqp://u:***@h/vhost"},
      // Not parseable as a URL, still redacted: a password holding '?', '#', ':' or '@'.
      {"redis://p?w#1@h:99999/0", "redis://***@h:99999/0"},
      {"redis://u:p:w@1@h/0", "redis://u:***@h/0"},
      {"sqlite:x.db?=1&password=pw1", "sqlite:x.db?=1&password=***"},
      // A password holding an unencoded '/' (parsers end the host there).
      {"redis://u:pw1/x@h:1/0", "redis://u:***@h:1/0"},
      {"https://pw1/x@h/hook?a=1", "https://***@h/hook?a=1"},
      {"no-scheme?token=pw1", "no-scheme?token=***"},
      {"redis://h:1/0", "redis://h:1/0"},
  };
  for (const auto& [url, shown] : cases) {
    EXPECT_EQ(redact_url(url), shown) << url;
    std::string via_parse;  // Url::redacted(), or the parse error's message
    try {
      via_parse = Url::parse(url).redacted();
    } catch (const ConfigError& e) {
      via_parse = e.what();
    }
    EXPECT_EQ(via_parse.find("pw"), std::string::npos) << via_parse;
  }
}

TEST(RedactTest, SecretNames) {
  for (std::string_view n :
       {"password", "sasl.password", "ssl.key.password", "SSL.Keystore.Password", "token",
        "access_token", "header.Authorization", "client_secret", "api_key", "apikey",
        "header.X-Api-Key", "header.Cookie"})
    EXPECT_TRUE(is_secret_name(n)) << n;
  for (std::string_view n : {"prefix", "table", "stream", "sasl.username", "ssl.key.location",
                             "header.X-Trace", "maxlen", "timeout_ms"})
    EXPECT_FALSE(is_secret_name(n)) << n;
}

TEST(RedactTest, ParseErrorsNeverQuoteTheSecret) {
  for (std::string_view url :
       {"redis://pw1secret@h:99999/0", "redis://u:pw1secret@:1/0", "postgresql://u:pw1secret@[h/x",
        "sqlite:x.db?password=pw1secret&=2", "redis://h/0?token=pw1secret"}) {
    std::string e = error_of([&] {
      auto u = Url::parse(url);
      (void)u.int_param("timeout_ms", 1, 5);
      (void)u.int_param("token", 1, 5);
      u.reject_unknown();
    });
    EXPECT_NE(e, "(no error)") << url;
    EXPECT_EQ(e.find("pw1secret"), std::string::npos) << e;
  }
}

TEST(RedactTest, FreeTextLosesEveryKnownSecretValue) {
  Redactor r;
  r.add_url("kafka://b/t?sasl.password=p%40ssw0rd&x=1");
  r.add_url("redis://hunter22@h/0");
  r.add_url("sqlite:/tmp/x.db");  // nothing secret: no effect
  r.add_url("redis://u:ab@h/0");  // too short to scrub in free text
  EXPECT_EQ(r.redact("open kafka://b/t?sasl.password=p%40ssw0rd&x=1 failed"),
            "open kafka://b/t?sasl.password=***&x=1 failed");
  EXPECT_EQ(r.redact("librdkafka: bad value \"p@ssw0rd\""), "librdkafka: bad value \"***\"");
  EXPECT_EQ(r.redact("AUTH hunter22 refused; hunter22"), "AUTH *** refused; ***");
  EXPECT_EQ(r.redact("about a cab"), "about a cab");
}

}  // namespace
}  // namespace outpost::core
