#pragma once
// What `outpost relay` and every [[relay]] of `outpost run` share: one pipeline's settings turned
// into the relay's and the sink's options, the same way for both.

#include "config.h"
#include "outpost/relay.h"
#include "outpost/sink.h"

namespace outpost::cli {

// Every field of RelayOptions a pipeline sets (on_error and the hooks are the caller's).
RelayOptions relay_options(const PipelineConfig& c);
// The sink's share: concurrency, and the lease and backoff cap (for dedup-window checks).
SinkOptions sink_options(const PipelineConfig& c);

}  // namespace outpost::cli
