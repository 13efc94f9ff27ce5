// outpost relay: claim events from a store and deliver them to a sink.
//   outpost relay --store URL --sink URL [--batch N] [--lease-ms N] [--max-attempts N]
//     [--backoff-base-ms N] [--backoff-max-ms N] [--max-crashes N] [--concurrency N] [--unordered]
//     [--until-empty] [--deliver-timeout-ms N] [--drain-timeout-ms N] [--metrics ADDR]
//     [--log-format text|json]
// Runs until SIGTERM/SIGINT (then drains: no new delivery, deliveries in flight get up to one
// timeout or --drain-timeout-ms, the rest is released; a second signal gives them up at once) or,
// with --until-empty, until nothing is pending or leased. Prints a one-line summary on stderr at
// the end. Logs as the daemon does (log.h): text or JSON lines, and on a terminal a progress line
// (delivered/s, backlog, oldest pending age, dead) every 10 s.

#include <memory>
#include <string>

#include "cli.h"
#include "listen_address.h"
#include "log.h"
#include "outpost/error.h"
#include "pipeline_flags.h"
#include "pipeline_host.h"
#include "pipeline_limits.h"

namespace outpost::cli {
namespace {

// The flags of `outpost relay` are the keys of a [[relay]] pipeline of `outpost run`.
struct RelayArgs : PipelineConfig {
  std::string metrics;
};

// The pipeline host (pipeline_host.h) with one [[relay]] pipeline named "relay", from flags.
int run_relay(RelayArgs a, const std::string& log_format) {
  set_log_format("outpost relay", log_format);
  if (auto e = limits::backoff_order_error(a.backoff_base_ms, a.backoff_max_ms, "--backoff-base-ms",
                                           "--backoff-max-ms");
      !e.empty())
    throw ConfigError(e);
  if (auto e = limits::on_dead_error(a.unordered, a.on_dead, "--on-dead", "--unordered");
      !e.empty())
    throw ConfigError(e);
  // Usage errors before anything is opened: a bad flag or URL must leave no SQLite file or
  // PostgreSQL table behind (the host checks both URLs, then opens the sink and the store last).
  if (!a.metrics.empty()) resolve_listen_address(a.metrics, "--metrics");
  PipelineHost::Options options;
  options.listen = a.metrics;
  options.listen_name = "--metrics";
  options.serving_line = [](const std::string& host, int port) {
    return "metrics on http://" + host + ":" + std::to_string(port) + "/metrics";
  };
  PipelineHost host(options);
  a.name = "relay";
  host.open_and_start({PipelineConfig(a)});
  return host.run();
}

}  // namespace

Runner add_relay_command(CLI::App& root) {
  auto a = std::make_shared<RelayArgs>();
  auto format = std::make_shared<std::string>("text");
  CLI::App* sub = root.add_subcommand(
      "relay",
      "Deliver events from a store to a sink, at least once and in order per key.\n"
      "Runs until SIGTERM/SIGINT (then releases what it holds after at most one delivery\n"
      "timeout; a second signal: at once) or, with --until-empty,\n"
      "until nothing is pending or leased.");
  add_setting_flags<PipelineConfig>(sub, *a, relay_settings());
  sub->add_option("--metrics", a->metrics,
                  "Serve /metrics (Prometheus) and /healthz on HOST:PORT, e.g. 127.0.0.1:9100");
  add_log_format_and_schemes(sub, *format);
  return [a, format] { return run_relay(*a, *format); };
}

}  // namespace outpost::cli
