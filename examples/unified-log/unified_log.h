#pragma once
// The unified-log demo, run as `outpost demo unified-log` (docs/consumers.md): rides and their
// events written in one transaction, a relay that sends whole batches twice, two consumer
// processes that crash before commits and are restarted, and the proof that both consumers'
// totals equal the rides table. Built beside the examples, linked into the CLI, which keeps only
// its flags (apps/outpost/demo_unified_log.cpp).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace outpost::examples {

struct UnifiedLogOptions {
  std::string log, store;  // URLs; empty: file: and sqlite: in a temp dir
  int seconds = 10;
  double double_send_rate = 0.1;
  double crash_rate = 0.1;
  std::uint64_t seed = 0;  // 0: random (printed)
  bool json = false;       // print one JSON object last
  // The consumer process's own settings (the demo passes them on its command line).
  std::string name, checkpoint, run;
  // How the demo hears SIGTERM/SIGINT: called with what to do on one; the result is kept for as
  // long as the demo runs (the watcher). None: the demo is not told.
  std::function<std::shared_ptr<void>(std::function<void()> on_stop)> watch_stop;
  // The command that starts a consumer process of this demo, before its `--role consumer ...`
  // flags (the CLI: /proc/self/exe demo unified-log).
  std::vector<std::string> consumer_command;
};

// The demo. 0 when the totals agree, 1 when they do not; throws ConfigError for bad options
// (checked before anything is created) and Error when a part fails.
int run_unified_log_demo(UnifiedLogOptions options);

// One consumer process of the demo (started by run_unified_log_demo through consumer_command).
int run_unified_log_consumer(const UnifiedLogOptions& options);

}  // namespace outpost::examples
