#pragma once
// The one pipeline host of `outpost relay`, `outpost consume` and `outpost run`
// (docs/operations.md, "Signals"; docs/cli.md, "relay" and "consume"). `relay` and `consume` are
// the host with one pipeline built from flags, `run` the host with the pipelines of a config file.
// The host owns, once for all three:
//   - opening: every pipeline's URLs checked (check_pipeline_urls of pipeline_options.h, the
//     checks of `outpost check`) before any pipeline opens anything, then each opened sink
//     first, store last;
//   - the decorators (instrument.h) that measure each pipeline for /metrics, /readyz, progress;
//   - one thread per pipeline, stop (drain) and abort, and the give-up deadline after a second
//     stop signal (GiveUpDeadline);
//   - the summary lines and the progress line;
//   - the HTTP server (`--metrics`, `[http] listen`);
//   - the stop signals (SIGTERM/SIGINT) and, for the daemon, SIGHUP (SIGPIPE is ignored process
//     wide by main(), cli.h).
//
// Thread safety: pipelines() and the other PipelineSource calls from any thread (the HTTP server,
// the progress line); the rest from the thread that runs the command.

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "config.h"
#include "instrument.h"
#include "pipeline_options.h"
#include "pipeline_view.h"

namespace outpost::cli {

// One running pipeline on its own thread: a [[relay]] / `outpost relay`, or a [[consume]] /
// `outpost consume`. Opened by open_pipeline() (throws as the commands do for a bad URL or an
// unreachable store), started by start().
class HostedPipeline {
 public:
  HostedPipeline(AnyPipelineConfig config, std::string log_name)
      : config_(std::move(config)), log_name_(std::move(log_name)) {}
  virtual ~HostedPipeline() = default;  // kinds call stop_and_join() first: run() uses them
  HostedPipeline(const HostedPipeline&) = delete;
  HostedPipeline& operator=(const HostedPipeline&) = delete;

  // Runs the pipeline on its thread; `on_exit` when run() returned or threw (the error is kept:
  // error()).
  void start(std::function<void()> on_exit);
  // Drains (abort: gives deliveries in flight up); returns at once.
  virtual void stop(bool abort) = 0;
  void stop_and_join(bool abort);
  bool running() const { return running_.load(); }
  std::exception_ptr error() const;
  const AnyPipelineConfig& config() const { return config_; }
  const std::string& name() const { return pipeline_name(config_); }
  PipelineView view(std::shared_ptr<const void> keepalive) const;

  // The end-of-run line: `outpost relay`'s "delivered 3, failed 0, dead 0 (batches 1, ...)" or
  // `outpost consume`'s "read 3, delivered 3, ..."; `brief`: the daemon's per-pipeline line.
  virtual std::string summary(bool brief) const = 0;
  // Exit code of a run from flags that ended by itself without an error (relay --until-empty).
  virtual int exit_code() const { return 0; }
  // What a command from flags says on stop signals (the daemon says its own):
  struct StopTexts {
    std::string stopping;  // after the first signal's name; empty: nothing
    std::string again;     // after the second one's; empty: nothing
    std::string give_up;   // when the give-up deadline passes, before the summary
  };
  virtual StopTexts stop_texts() const = 0;

 protected:
  const std::string& log_name() const { return log_name_; }  // "" for a command from flags

 private:
  virtual void run() = 0;
  virtual void describe(PipelineView& v) const = 0;  // the kind's own fields of the view

  AnyPipelineConfig config_;
  std::string log_name_;
  std::thread thread_;
  std::atomic<bool> running_{true};
  mutable std::mutex mu_;
  std::string failure_;       // guarded by mu_
  std::exception_ptr error_;  // guarded by mu_
};

// Opens one pipeline (sink first, store last); `log_name` prefixes its log lines ("" for a
// command from flags: the command's own lines). Throws ConfigError / Error.
std::shared_ptr<HostedPipeline> open_pipeline(const AnyPipelineConfig& config,
                                              const std::string& log_name);

class PipelineHost final : public PipelineSource {
 public:
  struct Options {
    // The daemon: pipelines are named in log lines, one that fails is logged and the others go
    // on, the exit code is 0. A command from flags (one pipeline): its error is the command's
    // (main() prints it, exit 1) and its summary the command's last line.
    bool daemon = false;
    // Errors of opening a pipeline name the file and its table's line (the daemon).
    std::string file;
    // The HTTP server's HOST:PORT (empty: none), the name of the flag or key it came from, and
    // the start of the line that says where it serves ("metrics on http://", "http on ").
    std::string listen;
    std::string listen_name;
    std::function<std::string(const std::string& host, int port)> serving_line;
    // systemd's sd_notify (the daemon); none: nothing is notified.
    std::function<void(const std::string&)> notify;
    // SIGHUP (the daemon's reload); none: SIGHUP keeps its default action.
    std::function<void()> on_hangup;
  };
  // Call before any thread exists (SIGHUP is blocked here when on_hangup is set).
  explicit PipelineHost(Options options);
  ~PipelineHost() override;

  // Checks every pipeline's URLs, then opens them all (any failure: nothing is started), then
  // starts them and the HTTP server.
  void open_and_start(const std::vector<AnyPipelineConfig>& configs);
  // Until every pipeline has ended (until_empty, until_idle, an error) or a stop signal came and
  // they drained; then the summaries. Returns the exit code, or rethrows the error of a command's
  // pipeline.
  int run();

  // The daemon's reload (reload.cpp): applies `next`, a file that validated.
  void reload(const DaemonConfig& next);

  std::vector<PipelineView> pipelines() override;
  bool shutting_down() const override;
  std::string admin_token() const override;
  std::vector<std::string> allowed_hosts() const override;
  void set_http(const HttpConfig& http);

 private:
  // Runs fn; the daemon's errors name the file, the table's line and the pipeline.
  void in_context(const AnyPipelineConfig& c, const std::function<void()>& fn) const;
  // Checks the pipeline's URLs and opens it.
  std::shared_ptr<HostedPipeline> open(const AnyPipelineConfig& c) const;
  void launch(const std::shared_ptr<HostedPipeline>& p);  // mu_ held
  void stop_all(bool abort);
  void on_stop_signal(int signal, int count);

  Options options_;
  struct Signals;
  std::unique_ptr<Signals> signals_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<HostedPipeline>> pipelines_;  // guarded by mu_
  // Failed to start on the last reload: name -> why (guarded by mu_).
  std::map<std::string, std::string> failed_;
  HttpConfig http_;        // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  // A reload is between stopping a pipeline and starting its successor: none running then is
  // not "every pipeline ended" (guarded by mu_).
  bool reloading_ = false;
  std::mutex reload_mu_;  // one reload at a time
  std::atomic<int> signalled_{0};
};

}  // namespace outpost::cli
