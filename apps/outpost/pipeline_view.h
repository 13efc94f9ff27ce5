#pragma once
// What the daemon's HTTP routes (metrics.h, health.h, dashboard.h) and the progress line (log.h)
// read of the running pipelines: one view per pipeline, taken from the pipeline host
// (pipeline_host.h) through PipelineSource.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "instrument.h"
#include "outpost/consumer.h"
#include "outpost/relay.h"
#include "outpost/store.h"

namespace outpost::cli {

// Where a consume pipeline stands (`outpost consume`, a daemon [[consume]]).
struct ConsumerStatus {
  ConsumerCounters counters;
  std::string group;                 // the consumer group
  std::string source;                // the log's backend: "file", "kafka", ...
  std::string position;              // the group's committed checkpoint; empty: none yet/unknown
  std::optional<std::int64_t> lag;   // messages after the committed checkpoint; nullopt: unknown
  std::optional<std::int64_t> dead;  // parked messages; nullopt: checkpoint store unreachable
  std::string store_error;           // why `dead` is unknown
  std::string source_error;          // why `lag` is unknown
};
class ConsumerProbe {
 public:
  virtual ~ConsumerProbe() = default;
  // Any thread; may query the log and the checkpoint store (on connections of its own).
  virtual ConsumerStatus status() const = 0;
  // The group's dead letters, and the dashboard's retry/discard of some (row or event ids;
  // CheckpointStore::retry/discard). Throw what the checkpoint store throws.
  virtual std::vector<ConsumerDeadLetter> dead(std::size_t limit) const = 0;
  virtual std::size_t retry(std::span<const std::string> ids) const = 0;
  virtual std::size_t discard(std::span<const std::string> ids) const = 0;
  // The dashboard's seek and delete of the group (docs/consumers.md, "Moving and deleting a
  // group"; `to` as `outpost consumers seek --to` takes it). ConfigError for a bad target,
  // Error(not_found) when the group is not in the checkpoint store.
  struct Move {
    std::string source, from, to;
  };
  virtual Move seek(const std::string& to, bool reprocess) const = 0;
  virtual DeletedGroup delete_group() const = 0;
};

// One pipeline as the routes see it. `keepalive` holds whatever owns the pointers for the
// duration of one request (a daemon reload may drop the pipeline meanwhile).
struct PipelineView {
  std::string name;
  std::string sink;
  const Relay* relay = nullptr;              // a relay pipeline; null for a consume pipeline
  const ConsumerProbe* consumer = nullptr;   // a consume pipeline (relay and store are null)
  OutboxAdmin* store = nullptr;              // the store, its operators' half (stats, dead, ...)
  const PipelineMetrics* metrics = nullptr;  // null: no histograms, no liveness data
  bool running = true;                       // false: run() returned (finished or failed)
  std::string failure;                       // why it is not running, if it failed
  bool started = true;  // false: configured, but it failed to start (on a reload); `failure` why
  std::shared_ptr<const void> keepalive;
};

// What the routes read; implemented by the pipeline host (pipeline_host.h) of `outpost run`,
// `outpost relay` and `outpost consume`.
class PipelineSource {
 public:
  virtual ~PipelineSource() = default;
  virtual std::vector<PipelineView> pipelines() = 0;
  virtual bool shutting_down() const = 0;
  // The dashboard's admin token; empty: read-only (dashboard.h).
  virtual std::string admin_token() const { return {}; }
  // Host names served besides the listen address and localhost ([http] allowed_hosts;
  // http_server.h).
  virtual std::vector<std::string> allowed_hosts() const { return {}; }
};

}  // namespace outpost::cli
