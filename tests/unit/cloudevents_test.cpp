// The CloudEvents 1.0 binary-mode mapping (core/cloudevents.h) shared by the HTTP and broker
// sinks.

#include "core/cloudevents.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace outpost::core {
namespace {

std::map<std::string, std::string> as_map(
    const std::vector<std::pair<std::string, std::string>>& h) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : h) {
    EXPECT_FALSE(m.contains(k)) << "header " << k << " appears twice";
    m[k] = v;
  }
  return m;
}

TEST(CloudEvents, RequiredAttributes) {
  Event e = Event::make("order.created", R"({"a":1})", "order-7");
  auto h = as_map(cloudevents_headers(e));
  EXPECT_EQ(h["ce-specversion"], "1.0");
  EXPECT_EQ(h["ce-id"], e.id.str());
  EXPECT_EQ(h["ce-type"], "order.created");
  EXPECT_EQ(h["ce-source"], "outpost");
  EXPECT_EQ(h["ce-time"], format_rfc3339(e.occurred_at));
  EXPECT_EQ(h["ce-partitionkey"], "order-7");
  // ce-time is RFC 3339 UTC and parses back to the same instant.
  ASSERT_TRUE(parse_rfc3339(h["ce-time"]));
  EXPECT_EQ(*parse_rfc3339(h["ce-time"]), e.occurred_at);
  EXPECT_EQ(h["ce-time"].back(), 'Z');
}

TEST(CloudEvents, EmptyKeyHasNoPartitionKeyAndSourceIsConfigurable) {
  Event e = Event::make("t", "{}");
  auto h = as_map(cloudevents_headers(e, "/billing/eu"));
  EXPECT_FALSE(h.contains("ce-partitionkey"));
  EXPECT_EQ(h["ce-source"], "/billing/eu");
}

TEST(CloudEvents, HeadersBecomeExtensionsWithReducedNames) {
  Event e = Event::make("t", "{}", "k");
  e.headers.emplace("correlation_id", "c-1");
  e.headers.emplace("causation_id", "c-0");
  e.headers.emplace("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  e.headers.emplace("Schema-Version", "3");
  auto h = as_map(cloudevents_headers(e));
  EXPECT_EQ(h["ce-correlationid"], "c-1");
  EXPECT_EQ(h["ce-causationid"], "c-0");
  EXPECT_EQ(h["ce-traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  // ... and under its W3C name, as tracing libraries read it (issue 20 item 2).
  EXPECT_EQ(h["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_EQ(h["ce-schemaversion"], "3");
}

TEST(CloudEvents, UserHeadersNeverOverrideRequiredAttributes) {
  Event e = Event::make("real.type", "{}", "real-key");
  for (const char* name : {"id", "type", "source", "time", "specversion", "partitionkey", "ID",
                           "spec_version", "partition-key"})
    e.headers.emplace(name, "forged");
  e.headers.emplace("___", "unrepresentable");
  auto h = as_map(cloudevents_headers(e));
  EXPECT_EQ(h["ce-id"], e.id.str());
  EXPECT_EQ(h["ce-type"], "real.type");
  EXPECT_EQ(h["ce-source"], "outpost");
  EXPECT_EQ(h["ce-specversion"], "1.0");
  EXPECT_EQ(h["ce-partitionkey"], "real-key");
  EXPECT_FALSE(h.contains("ce-"));
  for (const auto& [k, v] : h) EXPECT_NE(v, "forged") << k;
}

TEST(CloudEvents, AttributeNames) {
  EXPECT_EQ(cloudevents_attribute_name("correlation_id"), "correlationid");
  EXPECT_EQ(cloudevents_attribute_name("X-Request-ID"), "xrequestid");
  EXPECT_EQ(cloudevents_attribute_name("v2"), "v2");
  EXPECT_EQ(cloudevents_attribute_name("_-."), "");
}

// datacontenttype travels as content-type (the payload's kind), once, never as ce-contenttype.
TEST(CloudEvents, ContentTypeIsTheDataContentType) {
  Event e = Event::make("t", "{}");
  EXPECT_EQ(as_map(cloudevents_headers(e))["content-type"], "application/json");
  e.headers.emplace(header::kContentType, "text/plain; charset=utf-8");
  auto h = as_map(cloudevents_headers(e));
  EXPECT_EQ(h["content-type"], "text/plain; charset=utf-8");
  EXPECT_FALSE(h.contains("ce-contenttype"));
  e.headers.emplace("datacontenttype", "forged");
  EXPECT_FALSE(as_map(cloudevents_headers(e)).contains("ce-datacontenttype"));
}

// The streaming form the broker sinks use and the list form are one mapping.
TEST(CloudEvents, StreamingFormEqualsTheList) {
  Event e = Event::make("t", "x", "k");
  e.headers.emplace("correlation_id", "c");
  e.headers.emplace(header::kContentType, "image/png");
  std::vector<std::pair<std::string, std::string>> streamed;
  char id[37];
  Rfc3339Formatter time;
  std::string scratch;
  for_each_cloudevents_header(
      e, format_event_id(e.id, id), time, scratch,
      [&](std::string_view k, std::string_view v) { streamed.emplace_back(k, v); });
  EXPECT_EQ(streamed, cloudevents_headers(e));
  EXPECT_EQ(std::string(time.format(e.occurred_at)), format_rfc3339(e.occurred_at));
}

}  // namespace
}  // namespace outpost::core
