// outpost demo unified-log: the flags of the demo whose code lives beside the examples
// (examples/unified-log/unified_log.h says what it proves and prints).
//   outpost demo unified-log [--log URL] [--store URL] [--seconds N] [--double-send-rate R]
//     [--crash-rate R] [--seed N] [--json]

#include <memory>
#include <string>

#include "cli.h"
#include "outpost/error.h"
#include "unified_log.h"

namespace outpost::cli {
namespace {

// The demo's options, with the hidden role of the consumer processes it starts.
struct DemoArgs : examples::UnifiedLogOptions {
  std::string role;
};

}  // namespace

Runner add_demo_command(CLI::App& root) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* demo = root.add_subcommand("demo", "Demonstrations that prove a guarantee end to end.");
  demo->require_subcommand(1, 1);
  CLI::App* sub = demo->add_subcommand(
      "unified-log",
      "Rides -> outbox -> relay (double sends) -> log -> two consumer processes (crashing before\n"
      "commit, restarted) keeping totals in SQL; proves both totals equal the rides table.");
  sub->add_option("--log", a->log, "Log URL (default: file: in a temp dir)");
  sub->add_option(
      "--store", a->store,
      "Store URL for rides, outbox and consumer state (default: sqlite: in a temp dir)");
  sub->add_option("--seconds", a->seconds, "How long the API writes rides")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  sub->add_option("--double-send-rate", a->double_send_rate,
                  "Probability that the relay sends a batch twice")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--crash-rate", a->crash_rate,
                  "Probability that a consumer kills itself (SIGKILL) before a commit")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  sub->add_option("--seed", a->seed, "Random seed (default: random, printed)");
  sub->add_flag("--json", a->json, "Print one JSON object last");
  // The consumer processes the demo starts (not for users).
  auto hidden = [&](const char* name, std::string& into) {
    sub->add_option(name, into)->group("");
  };
  hidden("--role", a->role);
  hidden("--name", a->name);
  hidden("--checkpoint", a->checkpoint);
  hidden("--run", a->run);
  return [a] {
    examples::UnifiedLogOptions o = *a;
    o.consumer_command = {"/proc/self/exe", "demo", "unified-log"};
    o.watch_stop = [](std::function<void()> on_stop) -> std::shared_ptr<void> {
      return std::make_shared<StopSignalWatcher>(
          [on_stop = std::move(on_stop)](int, int) { on_stop(); });
    };
    if (a->role == "consumer") return examples::run_unified_log_consumer(o);
    if (!a->role.empty()) throw ConfigError("--role: unknown role '" + a->role + "'");
    return examples::run_unified_log_demo(std::move(o));
  };
}

}  // namespace outpost::cli
