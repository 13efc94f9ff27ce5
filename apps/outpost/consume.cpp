// outpost consume: a bridge from a log to any sink, with the consumer's checkpoint, inbox and
// dead letters in a checkpoint store.
//   outpost consume --from URL --group NAME --checkpoint STORE_URL --sink URL [--batch N]
//     [--max-attempts N] [--backoff-base-ms N] [--backoff-max-ms N] [--until-idle MS]
//     [--unordered] [--quiet]
// Each batch: the inbox drops ids this group already delivered, the sink delivers the rest and
// confirms, then inbox rows and checkpoint commit in one transaction. At least once across
// kill -9 (a crash between the sink's confirmation and the commit repeats at most that batch);
// SIGTERM/SIGINT finish the batch in flight, then exit 0.

#include <atomic>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>

#include "cli.h"
#include "outpost/consumer.h"
#include "outpost/error.h"
#include "outpost/factory.h"

namespace outpost::cli {
namespace {

struct ConsumeArgs {
  std::string from, group, checkpoint, sink;
  std::size_t batch = 100;
  int max_attempts = 5;
  std::int64_t backoff_base_ms = 100;
  std::int64_t backoff_max_ms = 60'000;
  std::int64_t until_idle_ms = 0;
  bool unordered = false;
  bool quiet = false;
};

// Failed deliveries can come by the thousand (a sink down): the first ones, then one in 1000.
class ErrorLog {
 public:
  explicit ErrorLog(bool quiet) : quiet_(quiet) {}
  void operator()(const std::string& message) {
    auto n = count_.fetch_add(1) + 1;
    if (quiet_ || (n > 20 && n % 1000 != 0)) return;
    std::lock_guard lock(mu_);
    std::cerr << "outpost consume: " << message;
    if (n > 20) std::cerr << " (" << n << " errors so far)";
    std::cerr << "\n";
  }

 private:
  bool quiet_;
  std::atomic<std::uint64_t> count_{0};
  std::mutex mu_;
};

int run_consume(const ConsumeArgs& a) {
  if (a.backoff_max_ms < a.backoff_base_ms)
    throw ConfigError("--backoff-max-ms (" + std::to_string(a.backoff_max_ms) +
                      ") must be >= --backoff-base-ms (" + std::to_string(a.backoff_base_ms) + ")");
  if (a.group.empty()) throw ConfigError("--group must not be empty");
  // Every URL is checked before anything is opened or written.
  validate_checkpoint_store_url(a.checkpoint);
  auto source = open_source(a.from);  // validates; opens nothing until the first read
  SinkOptions sink_options;
  sink_options.backoff_max = Duration(a.backoff_max_ms);
  auto sink = open_sink(a.sink, sink_options);
  auto store = open_checkpoint_store(a.checkpoint);

  ConsumerOptions o;
  o.group = a.group;
  o.batch_size = a.batch;
  o.max_attempts = a.max_attempts;
  o.backoff_base = Duration(a.backoff_base_ms);
  o.backoff_max = Duration(a.backoff_max_ms);
  o.ordered = !a.unordered;
  o.until_idle = Duration(a.until_idle_ms);
  auto errors = std::make_shared<ErrorLog>(a.quiet);
  o.on_error = [errors](const std::string& m) { (*errors)(m); };
  Consumer consumer(*source, *store, o);

  std::vector<StoredEvent> events;  // reused across batches
  std::int64_t seq = 0;
  ConsumerHandler deliver = [&](ConsumerBatch& batch) {
    if (batch.size() == 0) return;  // only duplicates in this read
    events.clear();
    for (const auto& m : batch.messages()) {
      events.push_back(m.event);
      events.back().seq = ++seq;
      events.back().attempts = batch.attempt();
    }
    auto results = sink->deliver(events);
    for (std::size_t i = 0; i < results.size() && i < batch.size(); ++i)
      if (!results[i].ok())
        batch.fail(i, results[i].error.empty() ? "not delivered" : results[i].error);
  };

  StopSignalWatcher watcher([&consumer](int, int) { consumer.stop(); });
  consumer.run(deliver);
  sink->close();
  auto c = consumer.counters();
  std::cerr << "outpost consume: read " << c.read << ", delivered " << c.handled << ", duplicates "
            << c.duplicates << ", failed attempts " << c.failures << ", parked " << c.parked
            << ", retried " << c.retried << " (batches " << c.batches << ", errors " << c.errors
            << ")" << (watcher.received() ? " after signal" : "") << std::endl;
  return kExitOk;
}

}  // namespace

Runner add_consume_command(CLI::App& root) {
  auto a = std::make_shared<ConsumeArgs>();
  CLI::App* sub = root.add_subcommand(
      "consume",
      "Read a log (file:, ...) from the group's checkpoint and deliver to a sink; the inbox\n"
      "skips ids already delivered; checkpoint and inbox commit after the sink confirms.\n"
      "Runs until SIGTERM/SIGINT (then finishes the batch in flight) or --until-idle.");
  sub->add_option("--from", a->from, "Log URL (file:PATH)")->required();
  sub->add_option("--group", a->group, "Consumer group name (checkpoint, inbox, dead letters)")
      ->required();
  sub->add_option("--checkpoint", a->checkpoint,
                  "Checkpoint store URL (sqlite:PATH or postgresql://...)")
      ->required();
  sub->add_option("--sink", a->sink, "Sink URL (file:PATH, http(s)://..., kafka://..., ...)")
      ->required();
  sub->add_option("--batch", a->batch, "Messages per read and transaction")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_option("--max-attempts", a->max_attempts,
                  "Attempts before a message is parked, the first included")
      ->capture_default_str()
      ->check(CLI::Range(1, 1'000'000));
  sub->add_option("--backoff-base-ms", a->backoff_base_ms, "First retry delay cap in ms")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{86'400'000}));
  sub->add_option("--backoff-max-ms", a->backoff_max_ms, "Largest retry delay in ms")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{86'400'000}));
  sub->add_option("--until-idle", a->until_idle_ms,
                  "Exit once no message came for MS milliseconds (0: run until a signal)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{86'400'000}));
  sub->add_flag("--unordered", a->unordered,
                "Later messages of a parked key flow on (default: parked behind it)");
  sub->add_flag("--quiet", a->quiet, "Do not print delivery errors");
  sub->footer(supported_schemes_text());
  return [a] { return run_consume(*a); };
}

}  // namespace outpost::cli
