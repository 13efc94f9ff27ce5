// Fuzzes the daemon's configuration file parser (apps/outpost/config.h: `outpost run|check
// --config FILE`): TOML through toml11, then outpost's validation and ${NAME} expansion.
// Properties: every error is a ConfigError whose message starts with the file name (the contract
// is "file:line: what"); a config that loads parses again, to the same pipelines, from a file
// rebuilt out of what was loaded.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config.h"
#include "fuzz_check.h"
#include "outpost/error.h"
#include "outpost/factory.h"

namespace {

// Scheme names only: the parser checks that a URL's scheme is registered, never opens it.
void register_schemes() {
  for (const char* s : {"sqlite", "postgresql", "redis", "memory"})
    outpost::register_store_scheme(s, [](std::string_view, const outpost::StoreOptions&) {
      return std::unique_ptr<outpost::Store>();
    });
  for (const char* s : {"file", "http", "https", "kafka", "nats", "redis-stream"})
    outpost::register_sink_scheme(s, [](std::string_view, const outpost::SinkOptions&) {
      return std::unique_ptr<outpost::Sink>();
    });
}

// A fixed environment: A and B are set, everything else is unset.
std::optional<std::string> env(const std::string& name) {
  if (name == "A") return std::string("sqlite:/tmp/a.db");
  if (name == "B") return std::string("");
  return std::nullopt;
}

// TOML basic string with everything escaped that needs it.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool registered = (register_schemes(), true);
  (void)registered;
  const std::string text(reinterpret_cast<const char*>(data), size);
  outpost::cli::DaemonConfig config;
  try {
    config = outpost::cli::parse_config(text, "fuzz.toml", env);
  } catch (const outpost::ConfigError& e) {
    FUZZ_CHECK(std::string_view(e.what()).starts_with("fuzz.toml"));
    return 0;
  }
  // Loaded: write it back (values already expanded, so $ is escaped) and load that.
  auto dollar = [](const std::string& s) {
    std::string out;
    for (char c : s) out += c == '$' ? std::string("$$") : std::string(1, c);
    return quoted(out);
  };
  std::string again;
  if (!config.http.listen.empty() || !config.http.admin_token.empty())
    again += "[http]\nlisten = " + dollar(config.http.listen) +
             "\nadmin_token = " + dollar(config.http.admin_token) + "\n";
  for (const auto& p : config.relays) {
    again += "[[relay]]\nname = " + dollar(p.name) + "\nstore = " + dollar(p.store) +
             "\nsink = " + dollar(p.sink) + "\nbatch = " + std::to_string(p.batch) +
             "\nlease_ms = " + std::to_string(p.lease_ms) +
             "\nmax_attempts = " + std::to_string(p.max_attempts) +
             "\nbackoff_base_ms = " + std::to_string(p.backoff_base_ms) +
             "\nbackoff_max_ms = " + std::to_string(p.backoff_max_ms) +
             "\nconcurrency = " + std::to_string(p.concurrency) +
             "\ndeliver_timeout_ms = " + std::to_string(p.deliver_timeout_ms) +
             "\ndrain_timeout_ms = " + std::to_string(p.drain_timeout_ms) +
             "\nunordered = " + (p.unordered ? "true" : "false") +
             "\nuntil_empty = " + (p.until_empty ? "true" : "false") +
             "\nquiet = " + (p.quiet ? "true" : "false") + "\n";
  }
  outpost::cli::DaemonConfig back;
  try {
    back = outpost::cli::parse_config(again, "again.toml", env);
  } catch (const outpost::ConfigError& e) {
    std::fprintf(stderr, "a loaded config does not load again: %s\n%s\n", e.what(), again.c_str());
    FUZZ_CHECK(false);
  }
  FUZZ_CHECK(back.relays == config.relays);
  FUZZ_CHECK(back.http.listen == config.http.listen);
  FUZZ_CHECK(back.http.admin_token == config.http.admin_token);
  return 0;
}
