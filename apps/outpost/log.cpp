#include "log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "error_log.h"
#include "pipeline_view.h"

namespace outpost::cli {
namespace {

std::shared_ptr<spdlog::logger>& logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto out = std::make_shared<spdlog::logger>("outpost",
                                                std::make_shared<spdlog::sinks::stderr_sink_mt>());
    out->set_pattern("outpost: %v");
    out->flush_on(spdlog::level::trace);
    return out;
  }();
  return l;
}
std::atomic<bool> json_format{false};
thread_local std::string thread_pipeline;  // PipelineLogScope

}  // namespace

PipelineLogScope::PipelineLogScope(const std::string& pipeline)
    : previous_(std::exchange(thread_pipeline, pipeline)) {}

PipelineLogScope::~PipelineLogScope() {
  thread_pipeline = std::move(previous_);
}

void set_log_format(const std::string& command, const std::string& format) {
  json_format.store(format == "json");
  if (format == "json")
    logger()->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ",%v})", spdlog::pattern_time_type::utc);
  else
    logger()->set_pattern(command + ": %v");
}

bool json_logs() {
  return json_format.load();
}

void log(const std::string& line, const std::string& named, spdlog::level::level_enum level) {
  const std::string& pipeline = named.empty() ? thread_pipeline : named;
  std::string text = redact(line);
  if (json_format.load()) {
    nlohmann::json fields{{"level", spdlog::level::to_string_view(level).data()}, {"msg", text}};
    if (!pipeline.empty()) fields["pipeline"] = pipeline;
    std::string object = fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    logger()->log(level, "{}", object.substr(1, object.size() - 2));  // inside the braces
  } else {
    logger()->log(level, "{}{}", pipeline.empty() ? "" : "[" + pipeline + "] ",
                  escape_controls(text));
  }
}

std::function<void(const std::string&)> error_log(const std::string& pipeline, bool quiet) {
  auto errors = std::make_shared<std::atomic<std::uint64_t>>(0);
  return [pipeline, quiet, errors](const std::string& m) {
    auto n = errors->fetch_add(1) + 1;
    if (!quiet && error_is_printed(n)) log(m + errors_so_far(n), pipeline, spdlog::level::warn);
  };
}

bool Progress::wanted() {
  return !json_logs() && ::isatty(STDERR_FILENO);
}

namespace {
// Every 10 s; OUTPOST_PROGRESS_INTERVAL_MS changes it (tests, or a busier terminal).
std::chrono::milliseconds progress_interval() {
  if (const char* v = std::getenv("OUTPOST_PROGRESS_INTERVAL_MS")) {
    char* end = nullptr;
    long ms = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && ms >= 10 && ms <= 3'600'000)
      return std::chrono::milliseconds(ms);
  }
  return std::chrono::seconds(10);
}
}  // namespace

Progress::Progress(PipelineSource& source) : source_(source) {
  thread_ = std::thread([this] { loop(); });
}

Progress::~Progress() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Progress::loop() {
  std::map<std::string, std::uint64_t> last;
  auto last_time = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  const auto interval = progress_interval();
  while (!cv_.wait_for(lock, interval, [&] { return done_; })) {
    auto now = std::chrono::steady_clock::now();
    double secs = std::chrono::duration<double>(now - last_time).count();
    last_time = now;
    std::string line;
    for (const auto& p : source_.pipelines()) {
      std::optional<ConsumerStatus> consumer;
      if (p.consumer) consumer = p.consumer->status();
      std::uint64_t delivered = p.relay    ? p.relay->counters().delivered
                                : consumer ? consumer->counters.handled
                                           : 0;
      auto before = last[p.name];  // a pipeline restarted by a reload counts from 0 again
      char rate[32];
      std::snprintf(rate, sizeof rate, "%.1f/s",
                    double(delivered >= before ? delivered - before : delivered) / secs);
      last[p.name] = delivered;
      line += (line.empty() ? "" : " | ") + p.name + " " + rate;
      if (consumer) {
        line += consumer->lag ? " lag " + std::to_string(*consumer->lag) : " lag ?";
        if (consumer->dead.value_or(0)) line += " dead " + std::to_string(*consumer->dead);
      } else if (p.store) {
        try {
          auto s = p.store->stats();
          char age[32];
          std::snprintf(age, sizeof age, "%.1fs", double(s.oldest_pending_age.count()) / 1000.0);
          line += " backlog " + std::to_string(s.pending) + " oldest " + age;
          if (s.dead) line += " dead " + std::to_string(s.dead);
        } catch (const std::exception&) {
          line += " store unavailable";
        }
      }
    }
    log("progress: " + line);
  }
}

}  // namespace outpost::cli
