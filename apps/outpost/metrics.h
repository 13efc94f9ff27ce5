#pragma once
// /metrics, served by the HTTP server (http_server.h) of `outpost relay --metrics ADDR`,
// `outpost consume --metrics ADDR` and the daemon's [http] listen: Prometheus text with relay
// counters, store gauges (backlog, oldest pending age, leased, dead), histograms of
// claim/deliver/settle latency, batch size and time in the outbox; consumer counters, lag and
// dead count; outpost_build_info. Labels are bounded: pipeline, store (backend), sink (name),
// source (backend) only, never ids or keys (docs/operations.md, "Metrics").

#include <string>
#include <vector>

#include "pipeline_view.h"

namespace outpost::cli {

class HttpServer;
void add_metrics_routes(HttpServer& server, PipelineSource& source);

// The Prometheus text for one scrape (exposed for tests).
std::string metrics_text(const std::vector<PipelineView>& pipelines);

}  // namespace outpost::cli
