#include "health.h"

#include <httplib.h>

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>

#include "bounded_read.h"
#include "cli.h"
#include "http_server.h"

namespace outpost::cli {
namespace {

// Longest a pipeline's loop may go without any store or sink call before /readyz calls it stuck.
// The relay calls the store at least every poll interval (1 s) and renews leases every lease/3;
// a consumer reads its log at least every poll (500 ms) and calls the sink on every attempt.
constexpr std::chrono::seconds kLoopStuckAfter{120};

}  // namespace

std::string sink_down_reason(const PipelineView& p) {
  if (!p.running) return {};
  if (p.relay) {
    auto c = p.relay->counters();
    if (!c.sink_down) return {};
    std::string error = p.metrics ? p.metrics->last_error() : std::string();
    return "down since " + format_rfc3339(c.sink_down_since) + (error.empty() ? "" : ": " + error);
  }
  if (p.metrics && p.metrics->last_delivery_failed.load())
    return "the last batch failed: " + p.metrics->last_error();
  return {};
}

Readiness readiness(const std::vector<PipelineView>& pipelines, bool shutting_down) {
  nlohmann::json failing = nlohmann::json::array();
  nlohmann::json degraded = nlohmann::json::array();
  auto fail = [&](const std::string& pipeline, const char* check, const std::string& error) {
    failing.push_back({{"pipeline", pipeline}, {"check", check}, {"error", redact(error)}});
  };
  if (shutting_down) fail("", "shutting_down", "the daemon is draining and will exit");
  // Every store is read at once, each within kReadBudget (bounded_read.h): a store that hangs
  // fails its pipeline's store_connected, and the probe still answers in time.
  const auto deadline = std::chrono::steady_clock::now() + kReadBudget;
  std::vector<std::optional<BoundedReads<StoreStats>::Pending>> store_reads_of;
  std::vector<std::optional<BoundedReads<ConsumerStatus>::Pending>> consumer_reads_of;
  for (const auto& p : pipelines) {
    store_reads_of.emplace_back();
    consumer_reads_of.emplace_back();
    if (!p.started || !p.running) continue;
    if (OutboxAdmin* store = p.store)
      store_reads_of.back() =
          store_reads().start(read_key(p, store), p.keepalive, [store] { return store->stats(); });
    if (const ConsumerProbe* probe = p.consumer)
      consumer_reads_of.back() = consumer_reads().start(read_key(p, probe), p.keepalive,
                                                        [probe] { return probe->status(); });
  }
  for (std::size_t i = 0; i < pipelines.size(); ++i) {
    const auto& p = pipelines[i];
    if (!p.started) {
      fail(p.name, "started", p.failure);
      continue;
    }
    if (!p.running) {
      if (!p.failure.empty()) fail(p.name, "loop_alive", p.failure);
      continue;  // a pipeline that finished (until_empty) is not a failure
    }
    if (store_reads_of[i]) {
      auto r = store_reads().finish(*store_reads_of[i], deadline);
      if (!r.fresh || !r.value) fail(p.name, "store_connected", r.error);
    }
    if (consumer_reads_of[i]) {
      auto s = bounded_status(consumer_reads().finish(*consumer_reads_of[i], deadline));
      if (!s.store_error.empty()) fail(p.name, "store_connected", s.store_error);
      if (!s.source_error.empty()) fail(p.name, "source_connected", s.source_error);
    }
    if (auto why = sink_down_reason(p); !why.empty())
      degraded.push_back(
          {{"pipeline", p.name}, {"check", "sink_delivering"}, {"error", redact(why)}});
    if (p.metrics) {
      if (p.metrics->delivering.load() == 0 && p.metrics->idle_for() > kLoopStuckAfter)
        fail(p.name, "loop_alive",
             "no store or sink call for " + std::to_string(p.metrics->idle_for().count() / 1000) +
                 " s");
    }
  }
  Readiness r;
  r.ready = failing.empty();
  r.json = nlohmann::json{{"ready", r.ready}, {"failing", failing}, {"degraded", degraded}}.dump();
  return r;
}

void add_health_routes(HttpServer& server, PipelineSource& source) {
  // Liveness: the process answers; draining is still alive (a restart would lose the drain).
  server.probe("/healthz", [&source](const httplib::Request&, httplib::Response& res) {
    res.set_content(source.shutting_down() ? "ok (draining)\n" : "ok\n", "text/plain");
  });
  server.probe("/readyz", [&source](const httplib::Request&, httplib::Response& res) {
    auto r = readiness(source.pipelines(), source.shutting_down());
    res.status = r.ready ? 200 : 503;
    res.set_content(r.json + "\n", "application/json");
  });
}

}  // namespace outpost::cli
