// The one JSON encoding of an event (docs/cli.md): round trip, payloads that are JSON embedded as
// values and others carried as strings, required fields, and errors naming the bad field.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/edit_distance.h"
#include "outpost/error.h"
#include "outpost/json.h"

namespace outpost {
namespace {

using nlohmann::json;

TEST(JsonTest, StoredEventRoundTrips) {
  StoredEvent e;
  static_cast<Event&>(e) = Event::make("user.created", R"({"id":1,"name":"Ann"})", "user-1");
  e.headers["correlation_id"] = "c-1";
  e.headers["x-tenant"] = "acme";
  e.attempts = 3;
  std::string line = to_json(e);
  json j = json::parse(line);
  EXPECT_EQ(j["id"], e.id.str());
  EXPECT_EQ(j["type"], "user.created");
  EXPECT_EQ(j["key"], "user-1");
  EXPECT_EQ(j["payload"]["name"], "Ann");  // embedded as a value, not a string
  EXPECT_EQ(j["attempts"], 3);
  EXPECT_EQ(j["headers"]["x-tenant"], "acme");
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line";

  Event back = event_from_json(line);
  EXPECT_EQ(back.id, e.id);
  EXPECT_EQ(back.type, e.type);
  EXPECT_EQ(back.key, e.key);
  EXPECT_EQ(back.payload, e.payload);
  EXPECT_EQ(back.occurred_at, e.occurred_at);
  EXPECT_EQ(back.headers, e.headers);
}

TEST(JsonTest, EventWithoutAttemptsAndNonJsonPayloadAsString) {
  Event e = Event::make("t", "plain text, not JSON");
  json j = json::parse(to_json(e));
  EXPECT_FALSE(j.contains("attempts"));
  EXPECT_EQ(j["payload"], "plain text, not JSON");
  EXPECT_EQ(event_from_json(to_json(e)).payload, "plain text, not JSON");
}

TEST(JsonTest, MinimalInputNeedsOnlyTypeAndPayload) {
  Event e = event_from_json(R"({"type":"t","payload":{"a":[1,2]}})");
  EXPECT_EQ(e.type, "t");
  EXPECT_EQ(json::parse(e.payload), json::parse(R"({"a":[1,2]})"));
  EXPECT_TRUE(e.id.is_nil()) << "the store assigns one";
  EXPECT_TRUE(e.key.empty());
  EXPECT_TRUE(e.headers.empty());
}

TEST(JsonTest, GivenIdIsKept) {
  Event e =
      event_from_json(R"({"id":"9B2F6C1E-4A8D-4F3B-9C2E-7D1A0B5E3F21","type":"t","payload":1})");
  EXPECT_EQ(e.id.str(), "9b2f6c1e-4a8d-4f3b-9c2e-7d1a0b5e3f21");
  EXPECT_EQ(e.payload, "1");
}

TEST(JsonTest, BadInputNamesTheField) {
  auto message = [](const char* line) -> std::string {
    try {
      event_from_json(line);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(message("[1,2]").find("object"), std::string::npos);
  EXPECT_NE(message(R"({"payload":{}})").find("'type'"), std::string::npos);
  EXPECT_NE(message(R"({"type":"","payload":{}})").find("'type'"), std::string::npos);
  EXPECT_NE(message(R"({"type":"t"})").find("'payload'"), std::string::npos);
  EXPECT_NE(message(R"({"type":"t","payload":1,"id":"nope"})").find("'id'"), std::string::npos);
  EXPECT_NE(message(R"({"type":"t","payload":1,"key":5})").find("'key'"), std::string::npos);
  EXPECT_NE(message(R"({"type":"t","payload":1,"occurred_at":"yesterday"})").find("'occurred_at'"),
            std::string::npos);
  EXPECT_NE(message(R"({"type":"t","payload":1,"headers":{"a":1}})").find("'a'"),
            std::string::npos);
}

// What goes in comes out (issue 10 defect 6): every JSON value keeps its exact text, every
// string stays a string, and a line read back and written again is the same line.
TEST(JsonTest, EveryPayloadRoundTripsExactly) {
  const std::vector<std::pair<std::string, std::string>> cases{
      // input payload field, payload bytes stored
      {R"("123")", "123"},
      {R"("{\"a\":1}")", R"({"a":1})"},
      {R"("null")", "null"},
      {R"("")", ""},
      {R"("tab\tquote\" é 😀")", "tab\tquote\" é 😀"},
      {"null", "null"},
      {"true", "true"},
      {"-0", "-0"},
      {"1.10", "1.10"},
      {"1e2", "1e2"},
      {"123456789012345678901234567890", "123456789012345678901234567890"},
      {R"({"a": [1, 2.50, {"b": null}]})", R"({"a": [1, 2.50, {"b": null}]})"},
      {R"([])", "[]"},
      // A line break between tokens (a lone CR can be on one stdin line) is whitespace: stored as
      // the space the one-line encoding prints, so the printed line reads back the same (fuzzer).
      {"[1,\"2\"\r,{\"a\":[true,false]}]", "[1,\"2\" ,{\"a\":[true,false]}]"},
  };
  for (const auto& [field, bytes] : cases) {
    std::string line = R"({"type":"t","payload":)" + field + "}";
    Event e = event_from_json(line);
    EXPECT_EQ(e.payload, bytes) << line;
    const bool text = field.front() == '"';
    EXPECT_EQ(e.payload_kind(), text ? PayloadKind::text : PayloadKind::json) << line;
    std::string out = to_json(e);
    json j = json::parse(out);
    EXPECT_EQ(j["payload"], json::parse(field)) << out;
    EXPECT_EQ(j["payload"].is_string(), text) << out;
    Event back = event_from_json(out);
    EXPECT_EQ(back.payload, e.payload) << out;
    EXPECT_EQ(back.headers, e.headers) << out;
    EXPECT_EQ(to_json(back), out);
  }
}

TEST(JsonTest, BinaryTravelsAsBase64AndKindsAreKept) {
  Event bin = Event::make("t", std::string("\x00\xFF\xC3(\n", 5));
  bin.headers.emplace(header::kContentType, kBinaryContentType);
  json j = json::parse(to_json(bin));
  EXPECT_FALSE(j.contains("payload"));
  EXPECT_EQ(j["payload_base64"], "AP/DKAo=");
  EXPECT_EQ(event_from_json(to_json(bin)).payload, bin.payload);
  for (std::string_view b64 : {"", "QQ==", "QUI=", "QUJD"}) {
    Event e = event_from_json(R"({"type":"t","payload_base64":")" + std::string(b64) + "\"}");
    EXPECT_EQ(e.content_type(), kBinaryContentType);
    EXPECT_EQ(to_json(e), to_json(event_from_json(to_json(e))));
  }
  EXPECT_EQ(event_from_json(R"({"type":"t","payload_base64":"QUJD"})").payload, "ABC");

  // A JSON payload that is a JSON string says so, so it does not come back as text.
  Event js = Event::make("t", R"("quoted")");
  std::string out = to_json(js);
  EXPECT_EQ(json::parse(out)["headers"]["content_type"], "application/json") << out;
  EXPECT_EQ(event_from_json(out).payload, R"("quoted")");

  // Text that is not UTF-8 cannot be a JSON string: base64, same bytes back.
  Event bad = Event::make("t", "caf\xE9");
  bad.headers.emplace(header::kContentType, "text/plain; charset=latin1");
  EXPECT_EQ(event_from_json(to_json(bad)).payload, bad.payload);
  EXPECT_EQ(event_from_json(to_json(bad)).headers, bad.headers);
}

TEST(JsonTest, InputThatCannotBeKeptIsRefused) {
  auto message = [](const std::string& line) -> std::string {
    try {
      event_from_json(line);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message(R"({"type":"t","payload":1,"payload_base64":"QQ=="})").find("not both"),
            std::string::npos);
  for (std::string_view b64 : {"QQ", "Q===", "QR==", "QU JD", "QUJD\\n", "****"})
    EXPECT_NE(message(R"({"type":"t","payload_base64":")" + std::string(b64) + "\"}")
                  .find("'payload_base64'"),
              std::string::npos)
        << b64;
  EXPECT_NE(message(R"({"type":"t","payload":{"a":1},"headers":{"content_type":"text/plain"}})")
                .find("'content_type'"),
            std::string::npos);
  EXPECT_NE(message(R"({"type":"t","payload":"\ud800"})"), "(no error)") << "lone surrogate";
}

// Issue 17 item 4: a line is one object and nothing else, for every reader (the parser stops at a
// NUL byte: before, "{...}\0{...}" read as the first event); an unknown field is refused by strict
// input (emit -) and ignored by tolerant readers (consumers of a log a newer version wrote);
// every field printed for a stored event is known to both.
TEST(JsonTest, ALineIsOneObjectAndStrictInputKnowsEveryField) {
  auto message = [](const std::string& line, JsonInput input) -> std::string {
    try {
      event_from_json(line, input);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string one = R"({"type":"t","payload":1})";
  for (JsonInput input : {JsonInput::tolerant, JsonInput::strict}) {
    EXPECT_NE(message(one + '\0' + one, input).find("byte 24 is a NUL byte after the JSON value"),
              std::string::npos);
    EXPECT_NE(message(one + " x", input).find("byte 25 is 'x'"), std::string::npos);
    EXPECT_NE(message(one + one, input).find("byte 24 is '{'"), std::string::npos);
    EXPECT_EQ(message(one + " \t\r", input), "(no error)");
    EXPECT_NE(message("\xEF\xBB\xBF" + one + '\0' + one, input).find("byte 27 is a NUL byte"),
              std::string::npos)
        << "after a byte order mark too";
    // A JSON payload after a byte order mark is kept as written (fuzz: it was read as empty).
    EXPECT_EQ(event_from_json("\xEF\xBB\xBF"
                              R"({"type":"t","payload":[1,"2"]})",
                              input)
                  .payload,
              R"([1,"2"])");
    EXPECT_NE(message(R"({"type":"t",)" + std::string(1, '\0') + R"("payload":1})", input)
                  .find("not valid JSON at byte 12: a NUL byte"),
              std::string::npos);
    StoredEvent stored;
    static_cast<Event&>(stored) = Event::make("t", "1", "k");
    EXPECT_EQ(message(to_json(stored), input), "(no error)");
    DeadEvent dead;
    static_cast<Event&>(dead) = Event::make("t", "1", "k");
    dead.last_error = "boom";
    EXPECT_EQ(message(to_json(dead), input), "(no error)");
  }
  const std::string typo = R"({"type":"t","kye":"k","payload":1})";
  EXPECT_EQ(event_from_json(typo, JsonInput::tolerant).key, "");
  EXPECT_NE(message(typo, JsonInput::strict).find("unknown field 'kye' (did you mean 'key'?)"),
            std::string::npos);
  EXPECT_NE(message(R"({"type":"t","payload":1,"x":1})", JsonInput::strict)
                .find("unknown field 'x'; the fields are deliver_at, headers, id, key"),
            std::string::npos);
}

// "Did you mean" on a misspelt event field uses the one edit distance of the CLI and config
// (core/edit_distance.h), with ASCII case ignored as field names have always been matched.
TEST(JsonTest, AMisspeltFieldIsFoundByTheOneEditDistance) {
  EXPECT_EQ(core::edit_distance("btach", "batch"), 1u);
  EXPECT_EQ(core::edit_distance("Key", "key"), 1u) << "flags and config keys: case counts";
  EXPECT_EQ(core::edit_distance("KYE", "key", core::Case::ignored), 1u);
  auto message = [](const std::string& line) -> std::string {
    try {
      event_from_json(line, JsonInput::strict);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message(R"({"type":"t","KYE":"k","payload":1})")
                .find("unknown field 'KYE' (did you mean 'key'?)"),
            std::string::npos);
  EXPECT_NE(message(R"({"type":"t","Payload":1})").find("(did you mean 'payload'?)"),
            std::string::npos);
}

// The key position (outpost/key_seq.h, kKeySeqField) of a stored event with a key: printed after
// "key" (events list, the file sink), accepted and not read on input, also by `emit -`.
TEST(JsonTest, KeySeqIsPrintedForKeyedStoredEventsAndAcceptedOnInput) {
  StoredEvent e;
  static_cast<Event&>(e) = Event::make("t", "{}", "k");
  e.seq = 4711;
  const std::string line = to_json(e);
  EXPECT_NE(line.find(R"("key":"k","key_seq":4711,)"), std::string::npos) << line;
  EXPECT_EQ(event_from_json(line, JsonInput::strict).key, "k");
  e.key.clear();
  EXPECT_EQ(to_json(e).find("key_seq"), std::string::npos) << "no key, no order, no position";
  e.key = "k";
  e.seq = 0;
  EXPECT_EQ(to_json(e).find("key_seq"), std::string::npos) << "not read from a store";
}

TEST(JsonTest, DeliverAtRoundTrips) {
  Event e = Event::make("reminder.due", "{}");
  e.deliver_at = parse_rfc3339("2026-11-27T09:00:00.250000Z");
  std::string line = to_json(e);
  EXPECT_NE(line.find(R"("deliver_at":"2026-11-27T09:00:00.250000Z","headers")"), std::string::npos)
      << line;
  EXPECT_EQ(event_from_json(line, JsonInput::strict).deliver_at, e.deliver_at);
  EXPECT_EQ(to_json(Event::make("t", "{}")).find("deliver_at"), std::string::npos);
  EXPECT_THROW(event_from_json(R"({"type":"t","payload":1,"deliver_at":"soon"})"), ConfigError);
}

// JSON given as base64 under a JSON content_type is stored as every listing prints it, as a
// "payload" value is: its line breaks (whitespace between tokens) become spaces. Before, the
// bytes kept "\n" while every listing printed " ": the stored payload was not what came out.
TEST(JsonTest, JsonGivenAsBase64IsStoredAsItIsPrinted) {
  const std::string line =
      R"({"type":"t","headers":{"content_type":"application/json"},"payload_base64":"WzEsCjJd"})";
  for (JsonInput input : {JsonInput::tolerant, JsonInput::strict}) {
    Event e = event_from_json(line, input);
    EXPECT_EQ(e.payload, "[1, 2]");
    EXPECT_EQ(event_from_json(to_json(e), input).payload, e.payload);
  }
}

// One rule for payload bytes (emit --payload, payload_base64 under a content_type): what the
// bytes are must be what their kind says.
TEST(JsonTest, PayloadBytesMustBeWhatTheirKindSays) {
  auto check = [](std::string payload, std::string content_type) -> std::string {
    Event e = Event::make("t", std::move(payload));
    if (!content_type.empty()) e.headers.emplace(header::kContentType, content_type);
    try {
      check_payload_kind(e, "p");
    } catch (const ConfigError& x) {
      return x.what();
    }
    return std::string(e.content_type());
  };
  EXPECT_EQ(check(R"({"a":1})", ""), kJsonContentType);
  EXPECT_EQ(check("plain words", ""), kTextContentType);
  EXPECT_EQ(check(" [not json", "text/plain"), "text/plain");
  EXPECT_NE(check(" [not json", "").find("p starts like JSON but is not JSON at byte "),
            std::string::npos);
  EXPECT_NE(check("\xC3(", "").find("p is not UTF-8 (byte value 0xc3 at byte 0)"),
            std::string::npos);
  EXPECT_NE(check("\xC3(", "text/plain; charset=UTF-8").find("p is not UTF-8"), std::string::npos);
  EXPECT_EQ(check("caf\xE9", "text/plain; charset=\"ISO-8859-1\""),
            "text/plain; charset=\"ISO-8859-1\"");
  EXPECT_EQ(check("\xC3(", "image/png"), "image/png");
  EXPECT_NE(check("{", "application/cloudevents+json").find("p is not JSON at byte 1 (the end)"),
            std::string::npos);
  // A byte order mark before JSON: the bytes kept would not be JSON in a listing, so it is text
  // (or refused when the content type says JSON). Before: stored as JSON with the mark, and
  // `events list` and the file sink wrote lines that were not JSON.
  const std::string bom = "\xEF\xBB\xBF{\"a\":1}";
  EXPECT_EQ(check(bom, ""), kTextContentType);
  EXPECT_NE(check(bom, "application/json").find("p is not JSON at byte 0: a UTF-8 byte order mark"),
            std::string::npos);
}

// An event stored with such a payload under a JSON content type (before the rule above, or by
// another program through the emit contract) is written as base64: the line stays JSON and reads
// back to the same bytes.
TEST(JsonTest, APayloadWithAByteOrderMarkUnderAJsonTypeIsWrittenAsBase64) {
  Event e = Event::make("t", "\xEF\xBB\xBF{\"a\":1}");
  e.headers.emplace(header::kContentType, kJsonContentType);
  const std::string line = to_json(e);
  ASSERT_TRUE(nlohmann::json::accept(line)) << line;
  EXPECT_TRUE(nlohmann::json::parse(line).contains("payload_base64")) << line;
  EXPECT_EQ(event_from_json(line).payload, e.payload);
}

}  // namespace
}  // namespace outpost
