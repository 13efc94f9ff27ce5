// Fuzzes the JSON event decoder that `outpost emit -` uses (outpost/json.h) and the encoder.
// Properties: decoding throws nothing but ConfigError; what goes in comes out (issue 10 item 6):
// the encoding of a decoded event decodes again to the same event (id, type, key, payload and
// its kind, headers, occurred_at), and encodes to the same text; strict input (emit -) accepts
// a subset of it, read the same way, and accepts again what it accepted once encoded.

#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "outpost/error.h"
#include "outpost/json.h"

namespace {

// nlohmann's dump replaces invalid UTF-8 (U+FFFD), so only valid text is compared.
bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80           ? 1
                    : (c >> 5) == 0x6  ? 2
                    : (c >> 4) == 0xE  ? 3
                    : (c >> 3) == 0x1E ? 4
                                       : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    i += n;
  }
  return true;
}

bool headers_utf8(const outpost::Headers& h) {
  for (const auto& [k, v] : h)
    if (!valid_utf8(k) || !valid_utf8(v)) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  outpost::Event e;
  try {
    e = outpost::event_from_json(line);
  } catch (const outpost::ConfigError&) {
    return 0;
  }
  const std::string encoded = outpost::to_json(e);
  outpost::Event back;
  try {
    back = outpost::event_from_json(encoded);
  } catch (const outpost::ConfigError& ex) {
    std::fprintf(stderr, "encoded event does not decode: %s\n%s\n", ex.what(), encoded.c_str());
    FUZZ_CHECK(false);
  }
  FUZZ_CHECK(back.id == e.id);
  FUZZ_CHECK(back.occurred_at == e.occurred_at);
  FUZZ_CHECK(back.payload == e.payload);
  // Decoded input is UTF-8 already (nlohmann checks it); shown as U+FFFD only from old stores.
  if (valid_utf8(e.type)) FUZZ_CHECK(back.type == e.type);
  if (valid_utf8(e.key)) FUZZ_CHECK(back.key == e.key);
  if (headers_utf8(e.headers)) FUZZ_CHECK(back.headers == e.headers);
  FUZZ_CHECK(outpost::to_json(back) == encoded);

  // Strict input (emit -) refuses more, never less, and reads what it accepts as tolerant input
  // does; what it accepted, encoded, it accepts again (every printed field is a known field).
  outpost::Event strict;
  try {
    strict = outpost::event_from_json(line, outpost::JsonInput::strict);
  } catch (const outpost::ConfigError&) {
    return 0;
  }
  FUZZ_CHECK(outpost::to_json(strict) == encoded);
  try {
    (void)outpost::event_from_json(encoded, outpost::JsonInput::strict);
  } catch (const outpost::ConfigError& ex) {
    std::fprintf(stderr, "encoded event is refused as strict input: %s\n%s\n", ex.what(),
                 encoded.c_str());
    FUZZ_CHECK(false);
  }
  return 0;
}
