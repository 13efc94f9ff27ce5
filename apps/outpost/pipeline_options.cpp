#include "pipeline_options.h"

#include "outpost/error.h"
#include "outpost/factory.h"
#ifdef OUTPOST_HAVE_CONSUME
#include "outpost/consumer.h"
#endif

namespace outpost::cli {

RelayOptions relay_options(const PipelineConfig& c) {
  RelayOptions o;
  o.batch_size = c.batch;
  o.lease = Duration(c.lease_ms);
  o.max_attempts = c.max_attempts;
  o.backoff_base = Duration(c.backoff_base_ms);
  o.backoff_max = Duration(c.backoff_max_ms);
  o.max_crashes = c.max_crashes;
  o.order = c.unordered ? ClaimOrder::unordered : ClaimOrder::ordered;
  o.until_empty = c.until_empty;
  o.deliver_timeout = Duration(c.deliver_timeout_ms);
  o.drain_timeout = Duration(c.drain_timeout_ms);
  return o;
}

SinkOptions sink_options(const PipelineConfig& c) {
  SinkOptions o;
  o.concurrency = c.concurrency;
  o.lease = Duration(c.lease_ms);
  o.backoff_max = Duration(c.backoff_max_ms);
  return o;
}

std::unique_ptr<Store> open_relay_store(const PipelineConfig& c) {
  auto store = open_store(c.store);
  store->list(1);
  return store;
}

RelayEnds open_relay_ends(const PipelineConfig& c) {
  if (auto problem = check_pipeline_urls(c)) throw ConfigError(problem->what);
  RelayEnds ends;
  ends.sink = open_sink(c.sink, sink_options(c));
  ends.store = open_relay_store(c);
  return ends;
}

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
  try {
    check_sink_url(consume.sink);
  } catch (const ConfigError& e) {
    return UrlProblem{"sink", e.what()};
  }
#ifdef OUTPOST_HAVE_CONSUME
  try {
    validate_checkpoint_store_url(consume.checkpoint);  // the URL only: nothing is opened
  } catch (const ConfigError& e) {
    return UrlProblem{"checkpoint", e.what()};
  }
#endif
  return std::nullopt;
}

}  // namespace outpost::cli
