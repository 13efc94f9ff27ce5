// Fuzzes the store/sink URL parser (core/url.h) and the URL redaction (core/redact.h).
// Properties: parsing throws nothing but ConfigError; redaction never throws; a parsed URL's
// password never survives its redacted form, nor redact_url().

#include <cstdint>
#include <string>
#include <string_view>

#include "core/redact.h"
#include "core/url.h"
#include "fuzz_check.h"
#include "outpost/error.h"

using outpost::core::Url;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  const std::string redacted = outpost::core::redact_url(text);  // must not throw
  outpost::core::Redactor redactor;
  redactor.add_url(text);
  (void)redactor.redact(text);

  try {
    Url u = Url::parse(text);
    (void)u.host_list(1234);
    (void)u.param("prefix");
    try {
      (void)u.int_param("batch", 0, 1000);
      (void)u.bool_param("writer_lease");
      u.reject_unknown();
    } catch (const outpost::ConfigError&) {
    }
    if (!u.password().empty()) {
      // The redacted forms must still hide it where a password goes.
      for (const std::string& r : {u.redacted(), redacted}) {
        try {
          Url again = Url::parse(r);
          FUZZ_CHECK(again.password() != u.password() || u.password() == "***");
        } catch (const outpost::ConfigError&) {
        }
      }
    }
  } catch (const outpost::ConfigError&) {
  }
  return 0;
}
