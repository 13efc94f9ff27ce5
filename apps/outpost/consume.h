#pragma once
// One consume bridge (log -> sink, with the group's checkpoint, inbox and dead letters in a
// checkpoint store): what the pipeline host (pipeline_host.h) runs for `outpost consume` and for
// each [[consume]] table of `outpost run`. Built only with outpost_consume (OUTPOST_HAVE_CONSUME).
//
// Thread safety: run() on one thread; stop(), counters() and status() from any thread.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "config.h"
#include "outpost/consumer.h"
#include "outpost/sink.h"
#include "pipeline_view.h"

namespace outpost::cli {

class ConsumeBridge final : public ConsumerProbe {
 public:
  // Opens the source (which checks its URL and connects nothing yet), the sink and the
  // checkpoint store (ConnectionError when unreachable); the pipeline host has checked the other
  // URLs (check_pipeline_urls) and the options before.
  // `on_error` gets the errors the consumer survives and failed delivery attempts (must not
  // throw). With `metrics`, sink calls and source reads are measured into it (the daemon's
  // /metrics and /readyz); it must outlive the bridge.
  ConsumeBridge(const ConsumeArgs& args, std::function<void(const std::string&)> on_error,
                PipelineMetrics* metrics = nullptr);
  ~ConsumeBridge() override;

  // Consumes until stop() (the batch in flight is finished and committed) or until_idle, then
  // closes the sink. Throws what the consumer cannot survive (a group bound to another log).
  void run();
  void stop();
  ConsumerCounters counters() const;
  // Lag and dead count, read on connections of the bridge's own (not the running consumer's).
  ConsumerStatus status() const override;
  std::vector<ConsumerDeadLetter> dead(std::size_t limit) const override;
  std::size_t retry(std::span<const std::string> ids) const override;
  std::size_t discard(std::span<const std::string> ids) const override;
  Move seek(const std::string& to, bool reprocess) const override;
  DeletedGroup delete_group() const override;
  std::string_view sink_name() const;

 private:
  ConsumeArgs args_;
  std::unique_ptr<Source> source_;
  std::unique_ptr<Sink> sink_;
  std::unique_ptr<Sink> timed_sink_;  // sink_ measured, when there are metrics
  std::unique_ptr<CheckpointStore> store_;
  std::unique_ptr<Source> touching_source_;  // source_ marking the loop alive, with metrics
  std::unique_ptr<Consumer> consumer_;
  std::atomic<bool> moved_{false};  // an operator moved the group (ConsumerOptions::on_moved)
  // fn(checkpoint store) on the probe's own connection, reopened after a failure. A `read` that
  // fails on a connection opened earlier is tried once more on a fresh one: that connection may
  // have gone stale while idle (a PostgreSQL restart), and /readyz must not flap for it.
  // Mutations are not repeated: the first attempt may have been applied.
  template <class F>
  auto with_probe_store(F&& fn, bool read = false) const
      -> decltype(fn(std::declval<CheckpointStore&>()));
  mutable std::mutex probe_mu_;
  mutable std::unique_ptr<Source> probe_source_;          // guarded by probe_mu_
  mutable std::unique_ptr<CheckpointStore> probe_store_;  // guarded by probe_mu_
};

// "read 12, delivered 10, duplicates 2, failed attempts 0, parked 0, retried 0 (batches 3,
// errors 0)": the end-of-run summary of `outpost consume` and of a daemon [[consume]] pipeline.
std::string consume_summary(const ConsumerCounters& c);

}  // namespace outpost::cli
