#include "pipeline_host.h"

#include <signal.h>

#include <optional>
#include <variant>

#include "cli.h"
#ifdef OUTPOST_HAVE_CONSUME
#include "consume.h"
#endif
#include "bounded_read.h"
#include "dashboard.h"
#include "health.h"
#include "http_server.h"
#include "log.h"
#include "metrics.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/relay.h"
#include "pipeline_options.h"

namespace outpost::cli {
namespace {

// [[relay]] / `outpost relay`: store -> relay -> sink, measured by the instrument.h decorators.
class RelayPipeline final : public HostedPipeline {
 public:
  RelayPipeline(const PipelineConfig& config, const std::string& log_name)
      : HostedPipeline(config, log_name) {
    auto ends = open_relay_ends(config);  // sink first, store last (pipeline_options.h)
    sink_ = std::move(ends.sink);
    store_ = std::move(ends.store);
    sink_name_ = std::string(sink_->name());
    timed_store_ = instrument_store(*store_, metrics_);
    timed_sink_ = instrument_sink(*sink_, metrics_);
    RelayOptions options = relay_options(config);
    options.on_error = error_log(log_name, config.quiet);
    // A sink's outage is two lines however long it lasts: always logged, even with quiet.
    options.on_sink_state = [log_name](const std::string& m, bool down) {
      log(m, log_name, down ? spdlog::level::warn : spdlog::level::info);
    };
    // Likewise the store's: the end of an outage is said once, also with quiet (whose claim
    // errors are not printed), as a consumer says its log and checkpoint store work again.
    options.on_notice = [log_name](const std::string& m, bool warning) {
      log(m, log_name, warning ? spdlog::level::warn : spdlog::level::info);
    };
    relay_ = std::make_unique<Relay>(*timed_store_, *timed_sink_, options);
  }
  ~RelayPipeline() override { stop_and_join(false); }

  void stop(bool abort) override { abort ? relay_->abort() : relay_->stop(); }
  std::string summary(bool brief) const override {
    auto c = relay_->counters();
    if (brief)
      return "delivered " + std::to_string(c.delivered) + ", failed " + std::to_string(c.failed) +
             ", dead " + std::to_string(c.dead) + ", released " + std::to_string(c.released);
    return "delivered " + std::to_string(c.delivered) + ", failed " + std::to_string(c.failed) +
           ", dead " + std::to_string(c.dead) + " (batches " + std::to_string(c.batches) +
           ", released " + std::to_string(c.released) + ", unavailable " +
           std::to_string(c.unavailable) + ", sink outages " + std::to_string(c.sink_outages) +
           ", lease lost " + std::to_string(c.lease_lost) + ", store errors " +
           std::to_string(c.store_errors) + ")";
  }
  int exit_code() const override {
    const auto& c = std::get<PipelineConfig>(config());
    return c.until_empty && relay_->counters().dead > 0 ? kExitDeadLettered : kExitOk;
  }
  StopTexts stop_texts() const override {
    return {
        "stopping (deliveries in flight get up to one timeout; a second signal gives them up "
        "at once)",
        "giving up deliveries in flight",
        "the store or sink did not return within " +
            std::to_string(GiveUpDeadline::kGrace.count()) +
            " ms: exiting without waiting (events still leased are delivered again after "
            "their lease)"};
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
// [[consume]] / `outpost consume`: log -> consumer -> sink (the bridge of consume.h).
class ConsumePipeline final : public HostedPipeline {
 public:
  ConsumePipeline(const ConsumeConfig& config, const std::string& log_name)
      : HostedPipeline(config, log_name),
        bridge_(config.args, error_log(log_name, config.args.quiet), &metrics_) {}
  ~ConsumePipeline() override { stop_and_join(false); }

  // The consumer finishes the batch in flight either way (its sink call has its own timeout).
  void stop(bool) override { bridge_.stop(); }
  std::string summary(bool) const override { return consume_summary(bridge_.counters()); }
  StopTexts stop_texts() const override {
    return {"", "",
            "the log, checkpoint store or sink did not return within " +
                std::to_string(GiveUpDeadline::kGrace.count()) +
                " ms: exiting without waiting (the batch in flight is read again on the next run)"};
  }

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

// Throws the ConfigError of the first URL of `config` that does not pass its parse-only check.
void check_urls(const AnyPipelineConfig& config) {
  std::optional<UrlProblem> problem;
  if (const auto* relay = std::get_if<PipelineConfig>(&config))
    problem = check_pipeline_urls(*relay);
  else
    problem = check_pipeline_urls(std::get<ConsumeConfig>(config).args);
  if (problem) throw ConfigError(problem->what);
}

}  // namespace

void HostedPipeline::start(std::function<void()> on_exit) {
  thread_ = std::thread([this, on_exit = std::move(on_exit)] {
    // Lines logged on this thread name the pipeline, also those whose callers do not (log.h).
    PipelineLogScope scope(log_name_);
    try {
      run();
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      // As main() prints it for a command: "error (sqlite, corrupt): ...", so /readyz,
      // /api/overview and the log say what kind of failure stopped the pipeline.
      const auto* error = dynamic_cast<const Error*>(&e);
      failure_ = error ? "error (" + error->backend() + ", " +
                             std::string(to_string(error->code())) + "): " + e.what()
                       : std::string(e.what());
      error_ = std::current_exception();
      // The daemon says so and goes on; a command from flags ends with this error (main()).
      if (!log_name_.empty()) log("stopped by an error: " + failure_, name(), spdlog::level::err);
    }
    running_.store(false);
    on_exit();
  });
}

void HostedPipeline::stop_and_join(bool abort) {
  if (!thread_.joinable()) return;
  stop(abort);
  thread_.join();
}

std::exception_ptr HostedPipeline::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

PipelineView HostedPipeline::view(std::shared_ptr<const void> keepalive) const {
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

std::shared_ptr<HostedPipeline> open_pipeline(const AnyPipelineConfig& config,
                                              const std::string& log_name) {
  if (const auto* relay = std::get_if<PipelineConfig>(&config))
    return std::make_shared<RelayPipeline>(*relay, log_name);
#ifdef OUTPOST_HAVE_CONSUME
  return std::make_shared<ConsumePipeline>(std::get<ConsumeConfig>(config), log_name);
#else
  throw ConfigError("[[consume]] needs outpost_consume, which this build does not have");
#endif
}

// What runs beside the pipelines while the host runs; destroyed in reverse order.
struct PipelineHost::Signals {
  GiveUpDeadline give_up;
  std::optional<HttpServer> http;
  std::optional<StopSignalWatcher> stop;
  std::optional<HangupWatcher> hangup;
  std::optional<Progress> progress;
};

PipelineHost::PipelineHost(Options options)
    : options_(std::move(options)), signals_(std::make_unique<Signals>()) {
  // Before any thread, so only a watcher takes SIGHUP: the daemon's reload, or for one pipeline
  // a stop like SIGTERM (a closed terminal or SSH session drains it instead of killing it with
  // its events leased: docs/operations.md, "Signals").
  block_hangup();
}

PipelineHost::~PipelineHost() {
  signals_.reset();  // the HTTP server and the progress line read the pipelines
  // A store read of /metrics or /readyz still running holds its pipeline (bounded_read.h): waited
  // for, so that no pipeline is destroyed after main() returned; a hung store's read is left.
  if (options_.listen.empty()) return;
  if (auto left = reads_in_flight().settle(std::chrono::steady_clock::now() + kReadBudget))
    log(std::to_string(left) +
        " store read(s) of /metrics or /readyz did not return: exiting without them");
}

void PipelineHost::in_context(const AnyPipelineConfig& c, const std::function<void()>& fn) const {
  if (!options_.daemon) return fn();
  // Errors name the table ("FILE:LINE: [[consume]] 'x': ..." for a bad URL parameter).
  const bool relay = std::holds_alternative<PipelineConfig>(c);
  std::string table =
      std::string(relay ? "[[relay]]" : "[[consume]]") + " '" + pipeline_name(c) + "': ";
  int line = std::visit([](const auto& p) { return p.line; }, c);
  try {
    fn();
  } catch (const ConfigError& e) {
    throw ConfigError(options_.file + ":" + std::to_string(line) + ": " + table + e.what());
  } catch (const Error& e) {
    throw Error(e.code(), e.backend(), table + e.what());
  }
}

std::shared_ptr<HostedPipeline> PipelineHost::open(const AnyPipelineConfig& c) const {
  std::shared_ptr<HostedPipeline> p;
  in_context(c, [&] {
    check_urls(c);  // again: a reload opens one pipeline by itself
    p = open_pipeline(c, options_.daemon ? pipeline_name(c) : "");
  });
  return p;
}

void PipelineHost::open_and_start(const std::vector<AnyPipelineConfig>& configs) {
  // Every URL of every pipeline before the first one opens anything.
  for (const auto& c : configs) in_context(c, [&] { check_urls(c); });
  // The address is bound before any pipeline opens: one in use (another daemon) is a start error
  // that leaves no store or sink file behind (docs/operations.md, "Connections").
  if (!options_.listen.empty())
    signals_->http
        .emplace(options_.listen, options_.listen_name, [this] { return allowed_hosts(); })
        .bind();
  std::map<std::string, std::shared_ptr<HostedPipeline>> opened;
  for (const auto& c : configs) opened[pipeline_name(c)] = open(c);
  {
    std::lock_guard lock(mu_);
    pipelines_ = std::move(opened);
  }
  // Served before the threads start.
  if (!options_.listen.empty()) {
    HttpServer& http = *signals_->http;
    add_metrics_routes(http, *this);
    add_health_routes(http, *this);
    add_dashboard_routes(http, *this);
    http.listen();
    if (options_.serving_line)
      log(options_.serving_line(options_.listen.substr(0, options_.listen.rfind(':')),
                                signals_->http->port()));
  }
  std::lock_guard lock(mu_);
  for (auto& [name, p] : pipelines_) launch(p);
}

void PipelineHost::launch(const std::shared_ptr<HostedPipeline>& p) {
  p->start([this] {
    { std::lock_guard lock(mu_); }  // no lost wake-up between run()'s check and its sleep
    cv_.notify_all();
  });
}

void PipelineHost::stop_all(bool abort) {
  std::vector<std::shared_ptr<HostedPipeline>> all;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& [name, p] : pipelines_) all.push_back(p);
  }
  cv_.notify_all();
  for (auto& p : all) p->stop(abort);
}

void PipelineHost::on_stop_signal(int signal, int count) {
  signalled_.store(signal);
  const std::string name = signal == SIGINT ? "SIGINT" : signal == SIGHUP ? "SIGHUP" : "SIGTERM";
  const auto grace = GiveUpDeadline::kGrace;
  if (options_.daemon) {
    if (count == 1) {
      log(name +
          ": draining every pipeline (a second signal gives deliveries in flight up at once)");
      if (options_.notify) options_.notify("STOPPING=1");
      stop_all(false);
      return;
    }
    log(name + " again: giving up deliveries in flight");
    stop_all(true);
    signals_->give_up.give_up_after(grace, [grace] {
      log("a store, log or sink did not return within " + std::to_string(grace.count()) +
          " ms: stopped after signal without waiting (events still leased are delivered again "
          "after their lease)");
    });
    return;
  }
  // A command from flags: its one pipeline says what stopping means for it.
  std::shared_ptr<HostedPipeline> p;
  {
    std::lock_guard lock(mu_);
    if (pipelines_.empty()) return;
    p = pipelines_.begin()->second;
  }
  const auto texts = p->stop_texts();
  if (count == 1) {
    if (!texts.stopping.empty()) log(name + ": " + texts.stopping);
    stop_all(false);
    return;
  }
  if (!texts.again.empty()) log(name + " again: " + texts.again);
  stop_all(true);
  signals_->give_up.give_up_after(grace, [&] {
    log(texts.give_up);
    log(p->summary(false) + " after signal");
  });
}

int PipelineHost::run() {
  signals_->stop.emplace([this](int signal, int count) { on_stop_signal(signal, count); },
                         /*hangup_stops=*/!options_.on_hangup);
  if (options_.on_hangup) signals_->hangup.emplace(options_.on_hangup);
  if (Progress::wanted()) signals_->progress.emplace(*this);
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] {
      if (stopping_) return true;
      if (reloading_) return false;
      for (const auto& [name, p] : pipelines_)
        if (p->running()) return false;
      return true;
    });
  }
  signals_->hangup.reset();  // a reload in progress finishes first; none starts after this
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  signals_->progress.reset();
  std::map<std::string, std::shared_ptr<HostedPipeline>> all;
  {
    std::lock_guard lock(mu_);
    all = pipelines_;
  }
  for (auto& [name, p] : all) {
    p->stop_and_join(false);
    if (options_.daemon) log(p->summary(true), name);
  }
  signals_->give_up.finished();
  signals_->http.reset();
  const bool signalled = signalled_.load() != 0;
  if (options_.daemon) {
    log(std::string("stopped") + (signalled ? " after signal" : " (every pipeline ended)"));
    if (signalled) return kExitOk;
    // Every pipeline ended by itself (until_empty, until_idle): the worst of what each would
    // exit with as its own command, so a batch job run from a config tells "all delivered"
    // from "some given up" (3) and from "stopped by an error" (1). docs/operations.md.
    int code = kExitOk;
    for (const auto& [name, p] : all) {
      if (p->error()) return kExitRuntime;
      if (p->exit_code() != kExitOk) code = p->exit_code();
    }
    return code;
  }
  if (all.empty()) return kExitOk;
  const auto& p = all.begin()->second;
  log(p->summary(false) + (signalled ? " after signal" : ""));
  if (auto error = p->error()) std::rethrow_exception(error);
  return p->exit_code();
}

std::vector<PipelineView> PipelineHost::pipelines() {
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

bool PipelineHost::shutting_down() const {
  std::lock_guard lock(mu_);
  return stopping_;
}

std::string PipelineHost::admin_token() const {
  std::lock_guard lock(mu_);
  return http_.admin_token;
}

std::vector<std::string> PipelineHost::allowed_hosts() const {
  std::lock_guard lock(mu_);
  return http_.allowed_hosts;
}

void PipelineHost::set_http(const HttpConfig& http) {
  std::lock_guard lock(mu_);
  http_.admin_token = http.admin_token;
  http_.allowed_hosts = http.allowed_hosts;
}

}  // namespace outpost::cli
