#include "pipeline_options.h"

#include "outpost/error.h"
#include "outpost/factory.h"

namespace outpost::cli {

RelayOptions relay_options(const PipelineConfig& c) {
  RelayOptions o;
  o.batch_size = c.batch;
  o.lease = Duration(c.lease_ms);
  o.max_attempts = c.max_attempts;
  o.backoff_base = Duration(c.backoff_base_ms);
  o.backoff_max = Duration(c.backoff_max_ms);
  o.max_crashes = c.max_crashes;
  o.order = c.unordered           ? ClaimOrder::unordered
            : c.on_dead == "hold" ? ClaimOrder::strict
                                  : ClaimOrder::ordered;
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
  try {
    store->list(1);
  } catch (const Error& e) {
    // The first pending row cannot be read (docs/emit-contract.md): that is the relay's to
    // report, by the one path every host shares (its run() stops with the error; the daemon's
    // other pipelines go on: docs/operations.md). The store itself must still answer.
    if (e.code() != ErrorCode::corrupt) throw;
    store->stats();
  }
  return store;
}

RelayEnds open_relay_ends(const PipelineConfig& c) {
  if (auto problem = check_pipeline_urls(c)) throw ConfigError(problem->what);
  RelayEnds ends;
  ends.sink = open_sink(c.sink, sink_options(c));
  ends.store = open_relay_store(c);
  return ends;
}

}  // namespace outpost::cli
