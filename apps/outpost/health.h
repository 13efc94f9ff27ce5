#pragma once
// Liveness and readiness of the pipeline host, served by the HTTP server (http_server.h):
//   /healthz  liveness: 200 while the process serves, also while draining.
//   /readyz   readiness: 200, or 503 with a JSON body naming each failing check (store
//             connected, loop alive, started, shutting down) per pipeline, and a sink that is
//             down as detail ("degraded").

#include <string>
#include <vector>

#include "pipeline_view.h"

namespace outpost::cli {

class HttpServer;
void add_health_routes(HttpServer& server, PipelineSource& source);

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
// Why the pipeline's sink is down, or empty: detail for /readyz and /api/overview. A relay says
// so itself (RelayCounters::sink_down: it pauses an unavailable sink and probes it, so it also
// knows when the sink is back while the pipeline is idle): "down since <RFC 3339>: <error>".
// Events the destination refuses are not the sink being down (they are failed attempts and dead
// letters). A consumer's: its last batch failed as a whole.
std::string sink_down_reason(const PipelineView& p);

}  // namespace outpost::cli
