// outpost run --config FILE: the daemon. Every [[relay]] of the file is a pipeline (store ->
// relay -> sink) and every [[consume]] one (log -> consumer -> sink, as `outpost consume`), each
// on its own thread, all in one process, with one HTTP server ([http] listen).
// outpost check --config FILE: validates the file and exits (0, or 2 naming file, line, key).
//
// Signals: SIGTERM/SIGINT drain every pipeline (a second one gives deliveries in flight up);
// SIGHUP reads the file again: pipelines added are started, removed ones stopped (drained),
// changed ones drained and started with the new settings, unchanged ones keep running; the
// admin token changes at once; [http] listen needs a restart (said in the log). A file that does
// not validate is refused and everything keeps running as it was.
// systemd: with NOTIFY_SOCKET set, READY=1 once every pipeline has started (Type=notify),
// RELOADING=1/READY=1 around a reload, STOPPING=1 when draining.

#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#ifdef OUTPOST_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include <algorithm>
#include <condition_variable>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include "cli.h"
#include "config.h"
#ifdef OUTPOST_HAVE_CONSUME
#include "consume.h"
#endif
#include "instrument.h"
#include "log.h"
#include "metrics.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/relay.h"
#include "pipeline_options.h"

namespace outpost::cli {
namespace {

void notify(const std::string& state) {
#ifdef OUTPOST_HAVE_SYSTEMD
  sd_notify(0, state.c_str());
#else
  (void)state;
#endif
}

// URLs from the file are redacted like URLs given as flags.
void register_secrets(const DaemonConfig& config) {
  for (const auto& r : config.relays) {
    add_secret_url(r.store);
    add_secret_url(r.sink);
  }
  for (const auto& c : config.consumers) {
    add_secret_url(c.args.from);
    add_secret_url(c.args.checkpoint);
    add_secret_url(c.args.sink);
  }
}

// One running pipeline on its own thread: a [[relay]] or a [[consume]]. Opened in the
// subclass's constructor (throws as the `outpost relay` / `outpost consume` commands do for a
// bad URL or an unreachable store), started by start().
class Pipeline {
 public:
  explicit Pipeline(AnyPipelineConfig config) : config_(std::move(config)) {}
  virtual ~Pipeline() = default;  // subclasses call stop_and_join() first: run() uses them
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  void start(std::function<void()> on_exit) {
    thread_ = std::thread([this, on_exit = std::move(on_exit)] {
      try {
        run();
      } catch (const std::exception& e) {
        std::lock_guard lock(mu_);
        failure_ = e.what();
        log("stopped by an error: " + failure_, name(), spdlog::level::err);
      }
      running_.store(false);
      on_exit();
    });
  }
  // Drains (abort: gives deliveries in flight up); returns at once.
  virtual void stop(bool abort) = 0;
  void stop_and_join(bool abort) {
    if (!thread_.joinable()) return;
    stop(abort);
    thread_.join();
  }
  bool running() const { return running_.load(); }
  const AnyPipelineConfig& config() const { return config_; }
  const std::string& name() const { return pipeline_name(config_); }
  PipelineView view(std::shared_ptr<const void> keepalive) const {
    PipelineView v;
    v.name = name();
    v.running = running_.load();
    {
      std::lock_guard lock(mu_);
      v.failure = failure_;
    }
    v.keepalive = std::move(keepalive);
    describe(v);
    return v;
  }
  virtual void log_summary() const = 0;

 private:
  virtual void run() = 0;
  virtual void describe(PipelineView& v) const = 0;  // the kind's own fields of the view

  AnyPipelineConfig config_;
  std::thread thread_;
  std::atomic<bool> running_{true};
  mutable std::mutex mu_;
  std::string failure_;  // guarded by mu_
};

// [[relay]]: store -> relay -> sink, measured by the instrument.h decorators.
class RelayPipeline final : public Pipeline {
 public:
  // Sink first, store last, as `outpost relay` (pipeline_options.h).
  explicit RelayPipeline(const PipelineConfig& config) : Pipeline(config) {
    auto ends = open_relay_ends(config);
    sink_ = std::move(ends.sink);
    store_ = std::move(ends.store);
    sink_name_ = std::string(sink_->name());
    timed_store_ = instrument_store(*store_, metrics_);
    timed_sink_ = instrument_sink(*sink_, metrics_);
    RelayOptions options = relay_options(config);
    options.on_error = error_log(config.name, config.quiet);
    // A sink's outage is two lines however long it lasts, as under `outpost relay`: always
    // logged, even with quiet.
    options.on_sink_state = [name = config.name](const std::string& m, bool down) {
      log(m, name, down ? spdlog::level::warn : spdlog::level::info);
    };
    relay_ = std::make_unique<Relay>(*timed_store_, *timed_sink_, options);
  }
  ~RelayPipeline() override { stop_and_join(false); }

  void stop(bool abort) override { abort ? relay_->abort() : relay_->stop(); }
  void log_summary() const override {
    auto c = relay_->counters();
    log("delivered " + std::to_string(c.delivered) + ", failed " + std::to_string(c.failed) +
            ", dead " + std::to_string(c.dead) + ", released " + std::to_string(c.released),
        name());
  }

 private:
  void run() override { relay_->run(); }
  void describe(PipelineView& v) const override {
    v.sink = sink_name_;
    v.relay = relay_.get();
    v.store = store_.get();
    v.metrics = &metrics_;
  }

  std::string sink_name_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Sink> sink_;
  PipelineMetrics metrics_;
  std::unique_ptr<Store> timed_store_;
  std::unique_ptr<Sink> timed_sink_;
  std::unique_ptr<Relay> relay_;
};

#ifdef OUTPOST_HAVE_CONSUME
// [[consume]]: log -> consumer -> sink, the bridge `outpost consume` runs (consume.h).
class ConsumePipeline final : public Pipeline {
 public:
  explicit ConsumePipeline(const ConsumeConfig& config)
      : Pipeline(config),
        bridge_(config.args, error_log(config.name, config.args.quiet), &metrics_) {}
  ~ConsumePipeline() override { stop_and_join(false); }

  // The consumer finishes the batch in flight either way (its sink call has its own timeout).
  void stop(bool) override { bridge_.stop(); }
  void log_summary() const override { log(consume_summary(bridge_.counters()), name()); }

 private:
  void run() override { bridge_.run(); }
  void describe(PipelineView& v) const override {
    v.sink = std::string(bridge_.sink_name());
    v.consumer = &bridge_;
    v.metrics = &metrics_;
  }

  PipelineMetrics metrics_;  // before bridge_, which measures into it
  ConsumeBridge bridge_;
};
#endif

std::shared_ptr<Pipeline> open_pipeline(const AnyPipelineConfig& config) {
  if (const auto* relay = std::get_if<PipelineConfig>(&config))
    return std::make_shared<RelayPipeline>(*relay);
#ifdef OUTPOST_HAVE_CONSUME
  return std::make_shared<ConsumePipeline>(std::get<ConsumeConfig>(config));
#else
  throw ConfigError("[[consume]] needs outpost_consume, which this build does not have");
#endif
}

class Daemon final : public PipelineSource {
 public:
  explicit Daemon(DaemonConfig config) : config_(std::move(config)) {}

  // Opens every pipeline (any failure: nothing is started), then starts them all.
  void start() {
    std::map<std::string, std::shared_ptr<Pipeline>> opened;
    for (const auto& p : config_.pipelines()) opened[pipeline_name(p)] = open(p);
    std::lock_guard lock(mu_);
    pipelines_ = std::move(opened);
    for (auto& [name, p] : pipelines_) launch(p);
  }

  // Until every pipeline has ended (until_empty, until_idle) or a stop signal came.
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] {
      if (stopping_) return true;
      for (const auto& [name, p] : pipelines_)
        if (p->running()) return false;
      return true;
    });
  }

  void stop(bool abort) {
    std::vector<std::shared_ptr<Pipeline>> all;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      for (auto& [name, p] : pipelines_) all.push_back(p);
    }
    cv_.notify_all();
    for (auto& p : all) p->stop(abort);
  }

  void join_all() {
    std::map<std::string, std::shared_ptr<Pipeline>> all;
    {
      std::lock_guard lock(mu_);
      all = pipelines_;
    }
    for (auto& [name, p] : all) {
      p->stop_and_join(false);
      p->log_summary();
    }
  }

  // SIGHUP: applies what changed in the file; a file that does not validate changes nothing.
  void reload() {
    std::lock_guard reload_lock(reload_mu_);
    notify("RELOADING=1");
    DaemonConfig next;
    try {
      next = load_config(config_.file);
    } catch (const std::exception& e) {
      log("reload refused, still running the previous configuration: " + std::string(e.what()));
      notify("READY=1");
      return;
    }
    register_secrets(next);
    if (next.http.listen != config_.http.listen)
      log("reload: [http] listen changed to '" + next.http.listen +
          "': needs a restart (still serving on '" + config_.http.listen + "')");
    std::vector<std::string> started, restarted, stopped, unchanged, failed;
    std::map<std::string, std::string> failures;  // name -> why it did not start
    std::map<std::string, AnyPipelineConfig> wanted;
    for (auto& p : next.pipelines()) {
      std::string name = pipeline_name(p);
      wanted.emplace(std::move(name), std::move(p));
    }

    std::map<std::string, std::shared_ptr<Pipeline>> current;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      current = pipelines_;
    }
    for (auto& [name, p] : current) {
      auto it = wanted.find(name);
      if (it != wanted.end() && it->second == p->config() && p->running()) {
        unchanged.push_back(name);
        continue;
      }
      p->stop_and_join(false);  // drains: deliveries in flight finish, the rest is released
      p->log_summary();
      std::lock_guard lock(mu_);
      pipelines_.erase(name);
      if (it == wanted.end()) stopped.push_back(name);
    }
    for (const auto& [name, config] : wanted) {
      if (std::find(unchanged.begin(), unchanged.end(), name) != unchanged.end()) continue;
      bool was_running = current.count(name) > 0;
      try {
        auto p = open(config);
        std::lock_guard lock(mu_);
        pipelines_[name] = p;
        launch(p);
        (was_running ? restarted : started).push_back(name);
      } catch (const std::exception& e) {
        failed.push_back(name);
        failures[name] = e.what();
        log(std::string("reload: cannot start: ") + e.what(), name, spdlog::level::err);
      }
    }
    {
      std::lock_guard lock(mu_);
      failed_ = std::move(failures);  // a later reload tries them again
      config_.relays = next.relays;
      config_.consumers = next.consumers;
      config_.http.admin_token = next.http.admin_token;
      config_.http.allowed_hosts = next.http.allowed_hosts;
    }
    auto list = [](const std::vector<std::string>& v) {
      std::string out;
      for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
      return out.empty() ? std::string("-") : out;
    };
    log("reloaded " + config_.file + ": started " + list(started) + "; restarted " +
        list(restarted) + "; stopped " + list(stopped) + "; unchanged " + list(unchanged) +
        (failed.empty() ? "" : "; failed to start " + list(failed)));
    notify("READY=1");
    cv_.notify_all();
  }

  std::vector<PipelineView> pipelines() override {
    std::lock_guard lock(mu_);
    std::vector<PipelineView> out;
    for (auto& [name, p] : pipelines_) out.push_back(p->view(p));
    // Configured but not running since a reload could not start them: shown, with why, in
    // /api/overview and /readyz (docs/operations.md).
    for (const auto& [name, why] : failed_) {
      PipelineView v;
      v.name = name;
      v.running = false;
      v.started = false;
      v.failure = "cannot start: " + why;
      out.push_back(std::move(v));
    }
    return out;
  }
  bool shutting_down() const override {
    std::lock_guard lock(mu_);
    return stopping_;
  }
  std::string admin_token() const override {
    std::lock_guard lock(mu_);
    return config_.http.admin_token;
  }
  std::vector<std::string> allowed_hosts() const override {
    std::lock_guard lock(mu_);
    return config_.http.allowed_hosts;
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return pipelines_.size();
  }

 private:
  // Errors name the table ("FILE:LINE: [[consume]] 'x': ..." for a bad URL parameter).
  std::shared_ptr<Pipeline> open(const AnyPipelineConfig& c) {
    const bool relay = std::holds_alternative<PipelineConfig>(c);
    std::string table =
        std::string(relay ? "[[relay]]" : "[[consume]]") + " '" + pipeline_name(c) + "': ";
    int line = std::visit([](const auto& p) { return p.line; }, c);
    try {
      return open_pipeline(c);
    } catch (const ConfigError& e) {
      throw ConfigError(config_.file + ":" + std::to_string(line) + ": " + table + e.what());
    } catch (const Error& e) {
      throw Error(e.code(), e.backend(), table + e.what());
    }
  }
  // mu_ held.
  void launch(const std::shared_ptr<Pipeline>& p) {
    p->start([this] {
      { std::lock_guard lock(mu_); }  // no lost wake-up between wait()'s check and its sleep
      cv_.notify_all();
    });
  }

  DaemonConfig config_;  // guarded by mu_ (file is constant)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Pipeline>> pipelines_;  // guarded by mu_
  std::map<std::string, std::string> failed_;  // guarded by mu_: failed to start on the last reload
  bool stopping_ = false;                      // guarded by mu_
  std::mutex reload_mu_;                       // one reload at a time
};

// SIGHUP taken on a thread of its own with sigwait (blocked everywhere, like SIGTERM).
class HangupWatcher {
 public:
  explicit HangupWatcher(std::function<void()> on_hangup) {
    thread_ = std::thread([this, on_hangup = std::move(on_hangup)] {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGHUP);
      for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0 || quit_.load()) return;
        on_hangup();
      }
    });
  }
  ~HangupWatcher() {
    quit_.store(true);
    pthread_kill(thread_.native_handle(), SIGHUP);
    thread_.join();
  }

 private:
  std::atomic<bool> quit_{false};
  std::thread thread_;
};

void block_hangup() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// [http] listen's host resolves, as --metrics does (listen_address.h): a name that does not is
// exit 2 naming the file and the host, before anything is opened (run) or at check.
void resolve_http_listen(const DaemonConfig& config) {
  if (!config.http.listen.empty())
    resolve_listen_address(config.http.listen, config.file + ": [http] listen");
}

int run_daemon(const std::string& file, const std::string& log_format) {
  block_hangup();  // before any thread: only the watcher takes SIGHUP
  DaemonConfig config = load_config(file);
  resolve_http_listen(config);  // before any pipeline opens its store
  set_log_format("outpost run", log_format.empty() ? config.log_format : log_format);
  register_secrets(config);
  Daemon daemon(config);
  daemon.start();
  std::optional<MetricsServer> http;
  if (!config.http.listen.empty()) {
    http.emplace(config.http.listen, daemon, "[http] listen");
    log("http on " + config.http.listen.substr(0, config.http.listen.rfind(':')) + ":" +
        std::to_string(http->port()) + " (/metrics /healthz /readyz)");
  }
  const auto count = std::to_string(config.pipelines().size());
  log("started " + count + " pipeline(s) from " + file);
  notify("READY=1\nSTATUS=" + count + " pipeline(s) running");

  GiveUpDeadline give_up;  // after a second signal the process ends within its grace
  StopSignalWatcher watcher([&daemon, &give_up](int signal, int count) {
    const char* name = signal == SIGINT ? "SIGINT" : "SIGTERM";
    if (count == 1) {
      log(std::string(name) +
          ": draining every pipeline (a second signal gives deliveries in "
          "flight up at once)");
      notify("STOPPING=1");
      daemon.stop(false);
    } else {
      log(std::string(name) + " again: giving up deliveries in flight");
      daemon.stop(true);
      give_up.give_up_after(GiveUpDeadline::kGrace, [] {
        log("a store, log or sink did not return within " +
            std::to_string(GiveUpDeadline::kGrace.count()) +
            " ms: stopped after signal without waiting (events still leased are delivered again "
            "after their lease)");
      });
    }
  });
  HangupWatcher hangup([&daemon] { daemon.reload(); });
  std::optional<Progress> progress;
  if (Progress::wanted()) progress.emplace(daemon);
  daemon.wait();
  progress.reset();
  daemon.join_all();
  give_up.finished();
  http.reset();
  log(std::string("stopped") + (watcher.received() ? " after signal" : " (every pipeline ended)"));
  return kExitOk;
}

}  // namespace

Runner add_run_command(CLI::App& root) {
  auto file = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>();
  CLI::App* sub = root.add_subcommand(
      "run",
      "Run the daemon: every [[relay]] and [[consume]] pipeline of a TOML config file in one\n"
      "process, with /metrics, /healthz and /readyz on [http] listen. SIGTERM/SIGINT drain,\n"
      "SIGHUP reloads.\n"
      "Reference: docs/operations.md.");
  sub->add_option("--config", *file, "TOML config file")->required();
  sub->add_option("--log-format", *format,
                  "text (default) or json: one JSON object per line ([log] format in the file)")
      ->check(CLI::IsMember({"text", "json"}));
  return [file, format] { return run_daemon(*file, *format); };
}

Runner add_check_command(CLI::App& root) {
  auto file = std::make_shared<std::string>();
  CLI::App* sub = root.add_subcommand(
      "check",
      "Validate a daemon config file without opening or starting anything: exit 0, or 2 with\n"
      "a message naming the file, line and key.");
  sub->add_option("--config", *file, "TOML config file")->required();
  return [file] {
    DaemonConfig config = load_config(*file);
    resolve_http_listen(config);
    std::cout << config.file << ": ok (" << config.pipelines().size() << " pipeline(s):";
    for (const auto& p : config.pipelines()) std::cout << " " << pipeline_name(p);
    std::cout << (config.http.listen.empty() ? "; no http" : "; http " + config.http.listen) << ")"
              << std::endl;
    return kExitOk;
  };
}

}  // namespace outpost::cli
