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
  sub->add_option("--store", a->store, "Store URL")->required()->envname("OUTPOST_STORE");
  sub->add_option("--sink", a->sink, "Sink URL (file:PATH, http(s)://..., kafka://..., ...)")
      ->required()
      ->envname("OUTPOST_SINK");
  sub->add_option("--batch", a->batch, "Events per claim")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, limits::kMaxBatch));
  sub->add_option("--lease-ms", a->lease_ms, "Lease per claim in ms (renewed every lease/3)")
      ->capture_default_str()
      ->check(CLI::Range(limits::kMinLeaseMs, limits::kMaxMs));
  sub->add_option("--max-attempts", a->max_attempts,
                  "Deliveries the destination refused before dead-lettering, the first included "
                  "(an unavailable destination pauses the relay and spends none)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, limits::kMaxAttempts));
  sub->add_option("--backoff-base-ms", a->backoff_base_ms, "First retry delay cap in ms")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, limits::kMaxMs));
  sub->add_option("--backoff-max-ms", a->backoff_max_ms, "Largest retry delay in ms")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, limits::kMaxMs));
  sub->add_option("--max-crashes", a->max_crashes,
                  "Claims of an event whose lease expired unsettled (the relay died or hung "
                  "delivering it) before dead-lettering it unseen")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, limits::kMaxAttempts));
  sub->add_option("--concurrency", a->concurrency,
                  "Parallel deliveries in the sink (per-key order kept)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, limits::kMaxConcurrency));
  sub->add_option("--deliver-timeout-ms", a->deliver_timeout_ms,
                  "Deadline of one batch's delivery: past it, events in flight fail (timed out) "
                  "and the rest is released (0: the lease)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, limits::kMaxMs));
  sub->add_option("--drain-timeout-ms", a->drain_timeout_ms,
                  "On SIGTERM/SIGINT, give deliveries in flight at most this long, then release "
                  "them (0: one sink timeout)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, limits::kMaxMs));
  sub->add_flag("--unordered", a->unordered, "No per-key order (higher throughput)");
  sub->add_flag("--until-empty", a->until_empty, "Exit when nothing is pending or leased");
  sub->add_option("--metrics", a->metrics,
                  "Serve /metrics (Prometheus) and /healthz on HOST:PORT, e.g. 127.0.0.1:9100");
  sub->add_flag("--quiet", a->quiet, "Do not print delivery errors");
  sub->add_option("--log-format", *format,
                  "text (default) or json: one JSON object per line; on a terminal, text adds a "
                  "progress line every 10 s")
      ->check(CLI::IsMember({"text", "json"}));
  sub->footer(supported_schemes_text());
  return [a, format] { return run_relay(*a, *format); };
}

}  // namespace outpost::cli
