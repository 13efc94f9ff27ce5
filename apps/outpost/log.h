#pragma once
// The log of the long-running commands (`outpost run`, `outpost relay`, `outpost consume`) on
// stderr through spdlog: text ("outpost run: [pipeline] message"; journald adds the time) or, with
// --log-format json ([log] format = "json" in the daemon's file), one JSON object per line:
// {"ts":"...Z","level":"info","msg":"...","pipeline":"orders"}. Everything is redacted first;
// payloads are never logged (delivery errors carry event ids and error text only).
//
// Thread safety: log() from any thread; set_log_format() once, before the first line.

#include <spdlog/common.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/escape_controls.h"

namespace outpost::cli {

class PipelineSource;

// `command` prefixes text lines ("outpost consume"); `format` is "text" or "json".
void set_log_format(const std::string& command, const std::string& format);
bool json_logs();
// Text log lines and error messages print outside text with its controls escaped.
using outpost::escape_controls;
void log(const std::string& line, const std::string& pipeline = {},
         spdlog::level::level_enum level = spdlog::level::info);

// The pipeline whose thread this is, for as long as the scope lives (HostedPipeline::start, the
// daemon's pipelines): a line logged on that thread without a pipeline of its own names it,
// whoever logs it (a consumer's pause and its end, the store working again), so every line of a
// pipeline carries its name (docs/operations.md, "Logs"). A pipeline's other threads log
// through callbacks that name it, or hand their lines to its thread (the consumer's read-ahead).
class PipelineLogScope {
 public:
  explicit PipelineLogScope(const std::string& pipeline);
  ~PipelineLogScope();
  PipelineLogScope(const PipelineLogScope&) = delete;
  PipelineLogScope& operator=(const PipelineLogScope&) = delete;

 private:
  std::string previous_;
};

// A pipeline's delivery errors as warnings, thinned out as error_log.h says (a sink down fails
// thousands), none with `quiet`.
std::function<void(const std::string&)> error_log(const std::string& pipeline, bool quiet);

// On a terminal (text logs on a tty), one line every 10 s instead of silence:
//   progress: orders 1520.3/s backlog 12 oldest 0.4s | webhook 80.0/s lag 3 dead 1
// Relays show delivered/s, backlog and oldest pending age; consumers delivered/s and lag; both
// the dead count when there is one. `source` must outlive the Progress.
class Progress {
 public:
  explicit Progress(PipelineSource& source);
  ~Progress();  // stops and joins the thread
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // Whether a Progress is wanted: text logs on a terminal.
  static bool wanted();

 private:
  void loop();
  PipelineSource& source_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace outpost::cli
