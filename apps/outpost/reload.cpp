// The daemon's reload (SIGHUP, docs/operations.md "Signals"): pipelines added are started,
// removed ones drained and stopped, changed ones drained and started with the new settings,
// unchanged ones keep running untouched; one that cannot start is logged and shown with its
// error (/readyz, /api/overview) and tried again on the next reload.

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "log.h"
#include "pipeline_host.h"

namespace outpost::cli {

void PipelineHost::reload(const DaemonConfig& next) {
  std::lock_guard reload_lock(reload_mu_);
  std::vector<std::string> started, restarted, stopped, unchanged, failed;
  std::map<std::string, std::string> failures;  // name -> why it did not start
  std::map<std::string, AnyPipelineConfig> wanted;
  for (auto& p : next.pipelines()) {
    std::string name = pipeline_name(p);
    wanted.emplace(std::move(name), std::move(p));
  }

  std::map<std::string, std::shared_ptr<HostedPipeline>> current;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    current = pipelines_;
    reloading_ = true;
  }
  // Whatever happens below, run() may again see that every pipeline ended once this is done.
  struct Done {
    PipelineHost& host;
    ~Done() {
      {
        std::lock_guard lock(host.mu_);
        host.reloading_ = false;
      }
      host.cv_.notify_all();
    }
  } done{*this};
  for (auto& [name, p] : current) {
    auto it = wanted.find(name);
    if (it != wanted.end() && it->second == p->config() && p->running()) {
      unchanged.push_back(name);
      continue;
    }
    p->stop_and_join(false);  // drains: deliveries in flight finish, the rest is released
    log(p->summary(true), name);
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
    http_.admin_token = next.http.admin_token;
    http_.allowed_hosts = next.http.allowed_hosts;
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
    return out.empty() ? std::string("-") : out;
  };
  log("reloaded " + options_.file + ": started " + list(started) + "; restarted " +
      list(restarted) + "; stopped " + list(stopped) + "; unchanged " + list(unchanged) +
      (failed.empty() ? "" : "; failed to start " + list(failed)));
  cv_.notify_all();
}

}  // namespace outpost::cli
