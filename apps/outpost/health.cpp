#include "health.h"

#include <httplib.h>

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>

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
  for (const auto& p : pipelines) {
    if (!p.started) {
      fail(p.name, "started", p.failure);
      continue;
    }
    if (!p.running) {
      if (!p.failure.empty()) fail(p.name, "loop_alive", p.failure);
      continue;  // a pipeline that finished (until_empty) is not a failure
    }
    if (p.store) {
      try {
        (void)p.store->stats();
      } catch (const std::exception& e) {
        fail(p.name, "store_connected", e.what());
      }
    }
    if (p.consumer) {
      auto s = p.consumer->status();
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
