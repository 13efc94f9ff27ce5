// Fuzzes the CloudEvents binary-mode header mapping (core/cloudevents.h): cloudevents_headers and
// the allocation-free for_each_cloudevents_header the sinks use. Properties: both give the same
// headers in the same order; required attributes are never overwritten by a user header; names
// are ce-[a-z0-9]+ or content-type; ce-time reads back to occurred_at exactly.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cloudevents.h"
#include "core/sink_batch.h"
#include "fuzz_check.h"

namespace {

// key, type, then header name/value pairs, separated by '\x1f'; the first 8 bytes, if there
// are 8, are occurred_at (us, any value: before 1970 and far future too).
outpost::Event event_from(std::string_view s) {
  outpost::Event e;
  if (s.size() >= 8) {
    std::uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(s[i]);
    auto us = static_cast<std::int64_t>(bits);
    // Years 0001-9999, the range RFC 3339 can write.
    constexpr std::int64_t kMin = -62'135'596'800'000'000LL, kMax = 253'402'300'799'999'999LL;
    us = kMin + static_cast<std::int64_t>(bits % static_cast<std::uint64_t>(kMax - kMin + 1));
    e.occurred_at = outpost::TimePoint(std::chrono::microseconds(us));
    s.remove_prefix(8);
  }
  std::vector<std::string_view> parts;
  while (true) {
    auto p = s.find('\x1f');
    parts.push_back(s.substr(0, p));
    if (p == std::string_view::npos) break;
    s.remove_prefix(p + 1);
  }
  std::size_t i = 0;
  if (i < parts.size()) e.key = parts[i++];
  if (i < parts.size()) e.type = parts[i++];
  for (; i + 1 < parts.size(); i += 2)
    e.headers.emplace(std::string(parts[i]), std::string(parts[i + 1]));
  e.id = outpost::EventId::generate();
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const outpost::Event e = event_from(std::string_view(reinterpret_cast<const char*>(data), size));
  const auto expected = outpost::core::cloudevents_headers(e);

  std::vector<std::pair<std::string, std::string>> got;
  char id[37];
  outpost::core::Rfc3339Formatter time;
  std::string scratch;
  outpost::core::for_each_cloudevents_header(
      e, outpost::core::format_event_id(e.id, id), time, scratch,
      [&](std::string_view k, std::string_view v) { got.emplace_back(k, v); });
  FUZZ_CHECK(got == expected);

  std::size_t required = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& [k, v] = expected[i];
    if (outpost::core::trace_context_header(k)) {
      // Under its W3C name too, right after its ce- attribute with the same value.
      FUZZ_CHECK(i > 0 && expected[i - 1].first == "ce-" + k && expected[i - 1].second == v);
      continue;
    }
    if (k == outpost::core::kCloudEventsContentType) {
      FUZZ_CHECK(v == e.content_type());
      ++required;
      continue;
    }
    FUZZ_CHECK(k.size() > 3 && k.compare(0, 3, "ce-") == 0);
    for (char c : k.substr(3)) FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'));
    if (k == "ce-id") FUZZ_CHECK(v == e.id.str());
    if (k == "ce-type") FUZZ_CHECK(v == e.type);
    if (k == "ce-time") {  // the time reads back exactly (microseconds)
      auto t = outpost::parse_rfc3339(v);
      FUZZ_CHECK(t && *t == e.occurred_at);
    }
    if (k == "ce-id" || k == "ce-type" || k == "ce-source" || k == "ce-time" ||
        k == "ce-specversion" || k == "ce-partitionkey")
      ++required;
  }
  FUZZ_CHECK(required == (e.key.empty() ? 6u : 7u));  // with content-type
  return 0;
}
