#pragma once
// What `outpost relay` and every [[relay]] of `outpost run` share: one pipeline's settings turned
// into the relay's and the sink's options, the same way for both.

#include <memory>
#include <optional>
#include <string>

#include "config.h"
#include "outpost/relay.h"
#include "outpost/sink.h"
#include "outpost/store.h"

namespace outpost::cli {

// Every field of RelayOptions a pipeline sets (on_error and the hooks are the caller's).
RelayOptions relay_options(const PipelineConfig& c);
// The sink's share: concurrency, and the lease and backoff cap (for dedup-window checks).
SinkOptions sink_options(const PipelineConfig& c);
// Opens the pipeline's store and reads from it once (one listed event), so a relay started
// against a server that is not there, refuses the password or holds an outbox this build cannot
// read fails at start with that error (exit 1) on every store, as PostgreSQL, which connects when
// opened, always did; Redis connects lazily and its relay would otherwise retry such a start
// forever. Once running, a store that goes away is retried with backoff, on every store.
std::unique_ptr<Store> open_relay_store(const PipelineConfig& c);

// A relay pipeline's two ends, opened in the one order of `outpost relay` and every [[relay]] of
// `outpost run`: both URLs checked first (nothing opened), then the sink (which checks the rest
// of its URL before it creates or connects anything), the store last, so a usage error leaves no
// SQLite file or table behind.
struct RelayEnds {
  std::unique_ptr<Sink> sink;
  std::unique_ptr<Store> store;
};
RelayEnds open_relay_ends(const PipelineConfig& c);

// The parse-only checks of one pipeline's URLs: the same for `outpost relay` / `outpost consume`
// (flags), for every [[relay]] / [[consume]] of `outpost run` and for `outpost check` (config.cpp
// names the key's line). Nothing is opened or created. Empty when every URL passes, else the key
// ("sink", "store", "checkpoint") and the message.
struct UrlProblem {
  std::string key;
  std::string what;
};
std::optional<UrlProblem> check_pipeline_urls(const PipelineConfig& relay);
std::optional<UrlProblem> check_pipeline_urls(const ConsumeArgs& consume);

}  // namespace outpost::cli
