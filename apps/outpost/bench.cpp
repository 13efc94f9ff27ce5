// outpost bench: end-to-end throughput, latency, RSS and the raw engine's baseline in one run.
//   outpost bench --store URL [--sink URL] [--events N] [--producers P] [--rate R] [--json] ...
// Prints a readable table; with --json one JSON object is printed last (docs/benchmarks.md).

#include <cmath>
#include <iostream>
#include <memory>
#include <string>

#include "bench.h"
#include "cli.h"

namespace outpost::cli {
namespace {

// CLI::Range lets NaN through (every comparison with NaN is false): `--rate nan` then paced
// nothing and hung. Infinity and negatives are outside every range below anyway.
const CLI::Validator kFinite(
    [](std::string& text) -> std::string {
      double v = 0;
      try {
        std::size_t used = 0;
        v = std::stod(text, &used);
        if (used != text.size()) return "'" + text + "' is not a number";
      } catch (const std::exception&) {
        return "'" + text + "' is not a number";
      }
      return std::isfinite(v) ? std::string() : "'" + text + "' is not a finite number";
    },
    "");

}  // namespace

Runner add_bench_command(CLI::App& root) {
  auto o = std::make_shared<bench::BenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto no_baseline = std::make_shared<bool>(false);
  auto no_backlog = std::make_shared<bool>(false);
  CLI::App* sub = root.add_subcommand(
      "bench",
      "Benchmark: events/s end-to-end, p50/p99/max emit-to-delivery latency at a steady rate,\n"
      "peak RSS, RSS against backlog size, and the raw engine's baseline in the same run.\n"
      "Without --sink events go to an in-process no-op handler. The store must be empty.");
  sub->add_option("--store", o->store_url, "Store URL (use a new, empty one)")->required();
  sub->add_option("--sink", o->sink_url, "Sink URL (default: in-process no-op handler)");
  sub->add_option("--events", o->events, "Events in the throughput phase")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000'000}));
  sub->add_option("--producers", o->producers, "Emitting threads")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
  sub->add_option("--emit-batch", o->emit_batch, "Events per emit_many transaction")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000}));
  sub->add_option("--relays", o->relays, "Relays, each with its own store connection")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}));
  sub->add_option("--sink-delay-ms", o->sink_delay_ms,
                  "The no-op sink takes this long per deliver() call (a broker's or webhook's "
                  "round trip)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{0}, std::size_t{60'000}));
  sub->add_option("--batch", o->batch, "Relay claim batch")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000}));
  sub->add_option("--concurrency", o->concurrency, "Sink concurrency")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1024}));
  sub->add_option("--payload-bytes", o->payload_bytes, "Payload size")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{16}, std::size_t{1 << 20}));
  sub->add_option("--keys", o->keys, "Distinct event keys (0: empty keys)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{0}, std::size_t{100'000'000}));
  sub->add_flag("--unordered", o->unordered, "Unordered claims");
  sub->add_flag("--prefill", o->prefill,
                "Emit every event first, then time the relays draining the backlog");
  sub->add_flag("--no-pipeline", o->no_pipeline,
                "Relays claim, deliver and settle strictly in turn (no overlap; for comparison)");
  sub->add_option("--rate", o->rate, "Events/s in the latency phase")
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::Range(1.0, 1e7));
  sub->add_option("--latency-seconds", o->latency_seconds, "Length of the latency phase (0: skip)")
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::Range(0.0, 3600.0));
  sub->add_flag("--no-baseline", *no_baseline, "Skip the raw-engine baseline");
  sub->add_flag("--no-backlog-check", *no_backlog, "Skip the RSS-against-backlog phase");
  sub->add_flag("--json", *json, "Print one JSON object last");
  sub->footer(supported_schemes_text());
  return [o, json, no_baseline, no_backlog] {
    o->baseline = !*no_baseline;
    o->backlog_check = !*no_backlog;
    auto r = bench::run_bench(*o, std::cout);
    if (*json) std::cout << r.to_json(*o) << std::endl;
    return kExitOk;
  };
}

}  // namespace outpost::cli
