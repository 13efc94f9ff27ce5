// The CLI's one redaction point: every URL the user gave (argv, OUTPOST_STORE, OUTPOST_SINK) is
// registered before anything runs, and every error, log line, metrics text and summary the CLI
// prints passes through redact(), so a secret quoted by any layer (ours or a client library's)
// is replaced by "***". The rule itself is core::redact_url / core::Redactor.

#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "cli.h"
#include "core/redact.h"

namespace outpost::cli {
namespace {

core::Redactor& redactor() {
  static core::Redactor r;
  return r;
}
// add_secret_url() may run while other threads redact (the daemon's reload).
std::shared_mutex& redactor_mutex() {
  static std::shared_mutex mu;
  return mu;
}

}  // namespace

void register_secret_sources(int argc, char** argv) {
  auto add = [](std::string_view text) {
    // "--store=redis://..." as one argument: the URL starts after the first '='.
    if (text.starts_with("-"))
      if (auto eq = text.find('='); eq != std::string_view::npos) text = text.substr(eq + 1);
    redactor().add_url(text);
  };
  for (int i = 1; i < argc; ++i) add(argv[i]);
  for (const char* env : {"OUTPOST_STORE", "OUTPOST_SINK"})
    if (const char* v = std::getenv(env)) add(v);
}

std::string redact(std::string_view text) {
  std::shared_lock lock(redactor_mutex());
  return redactor().redact(text);
}

void add_secret_url(std::string_view url) {
  std::unique_lock lock(redactor_mutex());
  redactor().add_url(url);
}

}  // namespace outpost::cli
