#pragma once
// The HTTP endpoints of `outpost relay --metrics ADDR` and of the daemon's [http] listen:
//   /metrics  Prometheus text: relay counters, store gauges (backlog, oldest pending age, leased,
//             dead), histograms of claim/deliver/settle latency and batch size; consumer
//             counters, lag and dead count. Labels are bounded: pipeline, store (backend), sink
//             (name), source (backend) only, never ids or keys.
//   /healthz  liveness: 200 while the process serves, also while draining.
//   /readyz   readiness: 200, or 503 with a JSON body naming each failing check (store
//             connected, sink delivering, loop alive, shutting down) per pipeline.
//   /         the operator dashboard and its /api/... (dashboard.h).
// One small cpp-httplib server on its own thread, 127.0.0.1 unless told otherwise, hardened for a
// port an operator's browser can reach (docs/operations.md, "HTTP endpoints"): a request whose
// Host is not the listen address, localhost (loopback) or an allowed name is refused (DNS
// rebinding); bodies are bounded and a mutation's token is checked before its body is read; a
// bounded pool of connections with read timeouts keeps /healthz answering beside slow clients.
// Refusals are logged (thinned out like delivery errors).

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "instrument.h"
#include "listen_address.h"
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

// One pipeline as the endpoints see it. `keepalive` holds whatever owns the pointers for the
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

// What the server reads; implemented by the pipeline host (pipeline_host.h) of `outpost run`,
// `outpost relay` and `outpost consume`.
class PipelineSource {
 public:
  virtual ~PipelineSource() = default;
  virtual std::vector<PipelineView> pipelines() = 0;
  virtual bool shutting_down() const = 0;
  // The dashboard's admin token; empty: read-only (dashboard.h).
  virtual std::string admin_token() const { return {}; }
  // Host names served besides the listen address and localhost ([http] allowed_hosts).
  virtual std::vector<std::string> allowed_hosts() const { return {}; }
};

class MetricsServer {
 public:
  // `addr` is HOST:PORT (port 0 picks a free one). Throws ConfigError for a malformed address
  // (naming `flag`) and Error(connection) when it cannot bind. `source` must outlive the server.
  MetricsServer(const std::string& addr, PipelineSource& source,
                const std::string& flag = "--metrics");
  ~MetricsServer();  // stops serving and joins
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;

 private:
  void start(const std::string& addr, PipelineSource& source, const std::string& flag);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The Prometheus text for one scrape and the /readyz verdict (exposed for tests).
std::string metrics_text(const std::vector<PipelineView>& pipelines);
// Readiness says whether the daemon serves: every configured pipeline started and running (or
// finished), its store (a consumer's checkpoint store and log) reachable, its loop not stuck, not
// draining. A sink that is down is not unreadiness: the pipeline holds its events and delivers
// once the sink is back, and a probe that took the daemon out of service would take the
// dashboard with it exactly when an operator needs it; it is reported as detail ("degraded").
struct Readiness {
  bool ready = true;
  // {"ready":bool,"failing":[{"pipeline":..,"check":..,"error":..}],
  //  "degraded":[{"pipeline":..,"check":"sink_delivering","error":..}]}
  std::string json;
};
Readiness readiness(const std::vector<PipelineView>& pipelines, bool shutting_down);
// Whether a request's Host header names this server: `listen_host` (the host of HOST:PORT),
// localhost names when that is a loopback address, any IP address when it is a wildcard one
// (0.0.0.0, ::), or one of `allowed` ("*": any). The port is not compared: a rebinding page
// differs in its name. Exposed for tests.
bool host_allowed(const std::string& host_header, const std::string& listen_host,
                  const std::vector<std::string>& allowed);
// Why the pipeline's sink is down, or empty: detail for /readyz and /api/overview. A relay says
// so itself (RelayCounters::sink_down: it pauses an unavailable sink and probes it, so it also
// knows when the sink is back while the pipeline is idle): "down since <RFC 3339>: <error>".
// Events the destination refuses are not the sink being down (they are failed attempts and dead
// letters). A consumer's: its last batch failed as a whole.
std::string sink_down_reason(const PipelineView& p);

}  // namespace outpost::cli
