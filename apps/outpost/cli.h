#pragma once
// Shared pieces of the `outpost` command line: each subcommand lives in its own file and
// registers itself on the root CLI11 app, returning the function main() runs when that
// subcommand was chosen. Exit codes (docs/cli.md): 0 ok, 2 usage/config error, 1 runtime failure.

#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace outpost::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;
// `outpost relay --until-empty` ended by itself having dead-lettered events in that run
// (docs/cli.md, "relay"): a batch job can tell "all delivered" from "some gave up".
inline constexpr int kExitDeadLettered = 3;

using Runner = std::function<int()>;

Runner add_emit_command(CLI::App& root);
Runner add_relay_command(CLI::App& root);
Runner add_events_command(CLI::App& root);
Runner add_bench_command(CLI::App& root);
// The daemon (run.cpp): run --config FILE, check --config FILE.
Runner add_run_command(CLI::App& root);
Runner add_check_command(CLI::App& root);
// schema.cpp: a store URL's emit contract (docs/emit-contract.md).
Runner add_schema_command(CLI::App& root);
// partitions.cpp: a PostgreSQL outbox's partition owners (docs/cli.md, "partitions").
Runner add_partitions_command(CLI::App& root);
// Consuming side (consume.cpp, consumers.cpp, demo_unified_log.cpp); built with outpost_consume.
Runner add_consume_command(CLI::App& root);
Runner add_consumers_command(CLI::App& root);
Runner add_demo_command(CLI::App& root);

// Secrets (core/redact.h): main() registers every URL given on the command line or in
// OUTPOST_STORE / OUTPOST_SINK before anything else, and everything the CLI prints about errors
// (messages, log lines, metrics text, the summary) goes through redact().
void register_secret_sources(int argc, char** argv);
std::string redact(std::string_view text);
// A URL learnt later (the daemon's config file, also on reload); safe while redact() runs.
void add_secret_url(std::string_view url);

// "Store URL schemes: sqlite, memory, ...\nSink URL schemes: file, http, https, ..."
std::string supported_schemes_text();

// SIGINT/SIGTERM without async-signal-unsafe work. main() blocks them before anything else, so
// every thread inherits the mask and a signal that comes before a command is ready stays pending
// (a SIGTERM in the first milliseconds after exec must drain the relay, not kill it). Commands
// that stop gracefully take them on a watcher thread with sigwait() and run `on_stop` there; main()
// unblocks them for every other command (the default action then ends it, exit 128+signal).
void block_stop_signals();
void unblock_stop_signals();
// The process's signal policy, set once by main() before any thread exists, for every command:
// the stop signals blocked (above) and SIGPIPE ignored. A write into a pipe or socket whose reader
// went away (a file sink on a FIFO or stdout, a peer that hung up) is then an EPIPE error the
// pipeline reports, never a signal that kills the process with every other pipeline in it
// (docs/operations.md, "Signals").
void set_process_signal_policy();
class StopSignalWatcher {
 public:
  // `on_stop(signal, count)`: count is 1 for the first stop signal, 2 for the second, ...
  // A signal pending from before the watcher existed is taken at once.
  // `hangup_stops`: SIGHUP is a stop signal too (block_hangup() first; the one-pipeline
  // commands, whose terminal going away must not end them as a crash would).
  explicit StopSignalWatcher(std::function<void(int signal, int count)> on_stop,
                             bool hangup_stops = false);
  ~StopSignalWatcher();  // ends and joins the watcher thread
  StopSignalWatcher(const StopSignalWatcher&) = delete;
  StopSignalWatcher& operator=(const StopSignalWatcher&) = delete;
  int received() const { return received_.load(); }  // last signal taken, 0 if none

 private:
  struct Impl;
  Impl* impl_;
  std::atomic<int> received_{0};
};

// SIGHUP for the daemon's reload, taken on a thread of its own with sigwait(), as the stop
// signals are. block_hangup() before any thread exists (PipelineHost does); `outpost relay` and
// `outpost consume` take it as a stop signal instead (StopSignalWatcher's hangup_stops).
void block_hangup();
class HangupWatcher {
 public:
  explicit HangupWatcher(std::function<void()> on_hangup);
  ~HangupWatcher();  // ends and joins the watcher thread (after a reload in progress)
  HangupWatcher(const HangupWatcher&) = delete;
  HangupWatcher& operator=(const HangupWatcher&) = delete;

 private:
  std::atomic<bool> quit_{false};
  std::thread thread_;
};

// Bounds how long the process takes to end after a second stop signal, whatever a store or sink
// call does (a server stopped with its TCP connection up can hang a call until its own timeout,
// or forever). The watcher thread asks the work to give up (Relay::abort()) and then calls
// give_up_after(): the work gets `grace` to release what it holds and return; if it has not,
// `last_words` runs (the summary line) and the process exits with exit code 0 without waiting
// for it (the events it still holds are redelivered after their lease, as after a crash). The
// normal end calls finished() first, before its own summary, so only one of the two runs.
class GiveUpDeadline {
 public:
  static constexpr std::chrono::milliseconds kGrace{2'000};
  void give_up_after(std::chrono::milliseconds grace, const std::function<void()>& last_words);
  void finished();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;  // guarded by mu_
};

}  // namespace outpost::cli
