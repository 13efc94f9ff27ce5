#pragma once
// Shared pieces of the `outpost` command line: each subcommand lives in its own file and
// registers itself on the root CLI11 app, returning the function main() runs when that
// subcommand was chosen. Exit codes (DESIGN §6): 0 ok, 2 usage/config error, 1 runtime failure.

#include <CLI/CLI.hpp>

#include <atomic>
#include <functional>
#include <string>

namespace outpost::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;

using Runner = std::function<int()>;

Runner add_emit_command(CLI::App& root);
Runner add_relay_command(CLI::App& root);
Runner add_events_command(CLI::App& root);
Runner add_bench_command(CLI::App& root);

// "Store URL schemes: sqlite, memory, ...\nSink URL schemes: file, http, https, ..."
std::string supported_schemes_text();

// SIGINT/SIGTERM handling without async-signal-unsafe work: the signals are blocked in every
// thread (call block_stop_signals() before starting any thread) and a watcher thread takes them
// with sigtimedwait() and runs `on_stop` on an ordinary thread.
void block_stop_signals();
class StopSignalWatcher {
 public:
  explicit StopSignalWatcher(std::function<void(int signal)> on_stop);
  ~StopSignalWatcher();  // joins the watcher thread
  StopSignalWatcher(const StopSignalWatcher&) = delete;
  StopSignalWatcher& operator=(const StopSignalWatcher&) = delete;
  int received() const { return received_.load(); }  // last signal taken, 0 if none

 private:
  struct Impl;
  Impl* impl_;
  std::atomic<int> received_{0};
};

}  // namespace outpost::cli
