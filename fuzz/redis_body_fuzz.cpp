// Fuzzes the Redis store's body codec (stores/redis/redis_body.h), which decodes what it reads
// back from Redis. Properties: decoding any bytes is safe; a decoded body packs to bytes that
// decode to the same event; any event (built from the input) survives pack + unpack unchanged.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "stores/redis/redis_body.h"

namespace {

bool same(const outpost::Event& a, const outpost::Event& b) {
  return a.key == b.key && a.type == b.type && a.occurred_at == b.occurred_at &&
         a.headers == b.headers && a.payload == b.payload;
}

// Splits the input at '\x1f' into key, type, header name/value pairs..., payload last.
outpost::Event event_from(std::string_view s) {
  outpost::Event e;
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
  if (i < parts.size() && !parts[i].empty()) {
    std::uint64_t us = 0;  // any 64-bit value (wraps), negative ones too
    for (unsigned char c : parts[i]) us = us * 131 + c;
    e.occurred_at = outpost::TimePoint(std::chrono::microseconds(static_cast<std::int64_t>(us)));
  }
  ++i;
  while (i + 2 < parts.size()) {
    e.headers.emplace(std::string(parts[i]), std::string(parts[i + 1]));
    i += 2;
  }
  for (; i < parts.size(); ++i) e.payload += parts[i];
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  using outpost::redis_store::pack_body;
  using outpost::redis_store::unpack_body;

  outpost::Event decoded;
  if (unpack_body(bytes, decoded)) {
    outpost::Event again;
    FUZZ_CHECK(unpack_body(pack_body(decoded), again));
    FUZZ_CHECK(same(decoded, again));
  }

  const outpost::Event built = event_from(bytes);
  outpost::Event back;
  FUZZ_CHECK(unpack_body(pack_body(built), back));
  FUZZ_CHECK(same(built, back));
  return 0;
}
