#pragma once
// `outpost bench` (docs/cli.md "bench", docs/benchmarks.md): end-to-end throughput,
// emit-to-delivery latency at a steady rate, peak RSS, RSS against backlog size, and the raw
// engine's baseline measured in the same run so that the ratio holds on a noisy shared machine.

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace outpost::bench {

struct BenchOptions {
  std::string store_url;          // required
  std::string sink_url;           // empty: an in-process no-op handler
  std::size_t events = 200'000;   // events in the throughput phase
  std::size_t producers = 1;      // emitting threads (emit_many of emit_batch events each)
  std::size_t emit_batch = 100;   // events per emit_many (one transaction)
  std::size_t relays = 1;         // relays, each with its own Store object (and sink)
  std::size_t sink_delay_ms = 0;  // the no-op sink takes this long per deliver() call
  std::size_t batch = 100;        // relay claim batch
  std::size_t concurrency = 1;    // sink concurrency
  std::size_t payload_bytes = 200;
  std::size_t keys = 1000;  // distinct event keys, round robin (0: empty key)
  bool unordered = false;
  bool prefill = false;  // throughput phases: emit every event first, then time the relays alone
  bool no_pipeline = false;    // relays claim -> deliver -> settle strictly in turn
  double rate = 1000;          // events/s in the latency phase
  double latency_seconds = 3;  // length of the latency phase (0: skip it)
  bool baseline = true;        // run the raw-engine baseline(s)
  bool backlog_check = true;   // measure RSS while draining a small and a large backlog
};

struct BenchResult {
  std::size_t events = 0;
  double seconds = 0;
  double events_per_s = 0;
  double emit_events_per_s = 0;               // producers alone, while the relay ran
  double p50_ms = 0, p99_ms = 0, max_ms = 0;  // latency phase
  std::size_t latency_samples = 0;
  double peak_rss_mb = 0;
  double rss_backlog_small_mb = 0, rss_backlog_large_mb = 0;  // peak VmRSS while draining
  std::size_t backlog_small = 0, backlog_large = 0;
  double baseline_events_per_s = 0;  // 0: no baseline for this store
  std::string baseline_what;
  double ratio = 0;
  // Scale-out (docs/benchmarks.md, "Relays that add up"): each relay's share of the throughput
  // phase, the same phase run again with one relay on the same store, and events_per_s over it
  // (0 with one relay). Order breaks (an event of a key delivered after a later one of that key)
  // and duplicates (an event delivered twice) over both phases; 0 expected.
  std::vector<double> per_relay_events_per_s;
  double single_relay_events_per_s = 0;
  double scale_out = 0;
  std::uint64_t order_breaks = 0;
  std::uint64_t duplicates = 0;
  double sink_baseline_events_per_s = 0;  // broker sinks: a plain producer loop
  std::string sink_baseline_what;
  double sink_ratio = 0;
  // Sink runs: the same relay and producers into a no-op sink (the store's ceiling), and
  // events_per_s over the lower of that and the sink baseline.
  double store_ceiling_events_per_s = 0;
  double lower_ceiling_ratio = 0;
  // What store and sink would do strictly one after the other: 1 / (1 / store ceiling + 1 / raw
  // producer), and events/s over it. Above 1 = store and sink work overlapped.
  double serial_ceiling_events_per_s = 0;
  double serial_ceiling_ratio = 0;

  // CPU spent per event while a phase ran: by this process (producers, relay, sink client
  // threads) and by the whole machine (every process: the broker's, and anyone else's), with
  // the share of all cores that was busy. Tells a run bound by CPU (busy near 1) from one bound
  // by waiting. Machine figures are 0 where /proc/stat cannot be read.
  struct Cpu {
    double process_us_per_event = 0;
    double machine_us_per_event = 0;
    double machine_busy = 0;  // 0..1
  };
  Cpu cpu;                // the throughput phase (end to end)
  Cpu store_ceiling_cpu;  // the no-op sink run
  Cpu sink_baseline_cpu;  // the plain producer loop

  // One JSON object (docs/cli.md, "bench"): the documented fields first, extra fields after.
  std::string to_json(const BenchOptions& options) const;
};

// Runs all phases, printing progress and a readable table to `out`. Throws outpost::Error
// (ConfigError for bad options, e.g. a store that is not empty).
BenchResult run_bench(const BenchOptions& options, std::ostream& out);

}  // namespace outpost::bench
