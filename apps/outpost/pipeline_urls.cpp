// Every URL of a pipeline checked before anything opens, sink first (the order they open in).
// Apart from pipeline_options.cpp because the config parser uses it alone (the config fuzz
// target links the parser without any backend: fuzz/CMakeLists.txt).
#include "outpost/error.h"
#include "outpost/factory.h"
#include "pipeline_options.h"
#ifdef OUTPOST_HAVE_CONSUME
#include "outpost/consumer.h"
#include "outpost/source.h"
#endif

namespace outpost::cli {

std::optional<UrlProblem> check_pipeline_urls(const PipelineConfig& relay) {
  // Sink first, store last: the order they open in.
  try {
    check_sink_url(relay.sink);
  } catch (const ConfigError& e) {
    return UrlProblem{"sink", e.what()};
  }
  try {
    check_store_url(relay.store);
  } catch (const ConfigError& e) {
    return UrlProblem{"store", e.what()};
  }
  return std::nullopt;
}

std::optional<UrlProblem> check_pipeline_urls(const ConsumeArgs& consume) {
#ifdef OUTPOST_HAVE_CONSUME
  // The log first, the order they open in. A source opens nothing until its first read
  // (include/outpost/source.h), so opening it here is its parse-only check.
  try {
    open_source(consume.from);
  } catch (const ConfigError& e) {
    return UrlProblem{"from", e.what()};
  }
#endif
  try {
    check_sink_url(consume.sink);
  } catch (const ConfigError& e) {
    return UrlProblem{"sink", e.what()};
  }
#ifdef OUTPOST_HAVE_CONSUME
  try {
    check_checkpoint_store_url(consume.checkpoint);  // the URL only: nothing is opened
  } catch (const ConfigError& e) {
    return UrlProblem{"checkpoint", e.what()};
  }
#endif
  return std::nullopt;
}

}  // namespace outpost::cli
