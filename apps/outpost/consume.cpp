// outpost consume: a bridge from a log to any sink, with the consumer's checkpoint, inbox and
// dead letters in a checkpoint store.
//   outpost consume --from URL --group NAME --checkpoint STORE_URL --sink URL [--batch N]
//     [--max-attempts N] [--backoff-base-ms N] [--backoff-max-ms N] [--until-idle MS]
//     [--unordered] [--quiet] [--log-format text|json]
// Each batch: the inbox drops ids this group already delivered, the sink delivers the rest and
// confirms, then inbox rows and checkpoint commit in one transaction. At least once across
// kill -9 (a crash between the sink's confirmation and the commit repeats at most that batch);
// SIGTERM/SIGINT finish the batch in flight, then exit 0. Logs as the daemon does (log.h): text
// or JSON lines, and on a terminal a progress line (delivered/s, lag, dead) every 10 s.

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "cli.h"
#include "consume.h"
#include "consumer_groups.h"
#include "log.h"
#include "outpost/consumer.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/source_wrapper.h"
#include "pipeline_flags.h"
#include "pipeline_host.h"
#include "pipeline_limits.h"

namespace outpost::cli {
namespace {

// The source as the daemon measures it: every read marks the loop alive (/readyz loop_alive),
// also when the log has nothing new.
class TouchingSource final : public SourceWrapper {
 public:
  TouchingSource(Source& inner, PipelineMetrics& metrics) : SourceWrapper(inner), m_(metrics) {}
  std::vector<Message> read(std::size_t max, Duration wait) override {
    m_.touch();
    auto out = target().read(max, wait);
    m_.touch();
    return out;
  }

 private:
  PipelineMetrics& m_;
};

// The pipeline host (pipeline_host.h) with one [[consume]] pipeline named after its group, from
// flags.
int run_consume(const ConsumeArgs& a, const std::string& log_format) {
  set_log_format("outpost consume", log_format);
  if (auto e = limits::backoff_order_error(a.backoff_base_ms, a.backoff_max_ms, "--backoff-base-ms",
                                           "--backoff-max-ms");
      !e.empty())
    throw ConfigError(e);
  if (auto e = limits::group_error(a.group); !e.empty()) throw ConfigError("--group " + e);
  PipelineHost host(PipelineHost::Options{});
  ConsumeConfig config;
  config.name = a.group;
  config.args = a;
  host.open_and_start({config});
  return host.run();
}

}  // namespace

ConsumeBridge::ConsumeBridge(const ConsumeArgs& a, std::function<void(const std::string&)> on_error,
                             PipelineMetrics* metrics)
    : args_(a) {
  // The sink's and checkpoint store's URLs were checked before anything is opened (the pipeline
  // host, check_pipeline_urls); the log's is read here and opens nothing until the first read.
  source_ = open_source(a.from);
  SinkOptions sink_options;
  sink_options.backoff_max = Duration(a.backoff_max_ms);
  sink_ = open_sink(a.sink, sink_options);
  store_ = open_checkpoint_store(a.checkpoint);
  Source* source = source_.get();
  if (metrics) {
    timed_sink_ = instrument_sink(*sink_, *metrics);
    touching_source_ = std::make_unique<TouchingSource>(*source_, *metrics);
    source = touching_source_.get();
  }

  ConsumerOptions o;
  o.group = a.group;
  o.batch_size = a.batch;
  o.max_attempts = a.max_attempts;
  o.backoff_base = Duration(a.backoff_base_ms);
  o.backoff_max = Duration(a.backoff_max_ms);
  o.ordered = !a.unordered;
  o.until_idle = Duration(a.until_idle_ms);
  o.on_error = std::move(on_error);
  // Transitions are said once each, also with --quiet (which only silences delivery errors).
  o.on_notice = [](const std::string& m, bool warning) {
    log(m, {}, warning ? spdlog::level::warn : spdlog::level::info);
  };
  // A seek: ids confirmed before it may come again (--reprocess), `sent` must not drop them.
  o.on_moved = [this](const std::string&) { moved_ = true; };
  consumer_ = std::make_unique<Consumer>(*source, *store_, o);
}

ConsumeBridge::~ConsumeBridge() = default;

void ConsumeBridge::run() {
  Sink& sink = timed_sink_ ? *timed_sink_ : *sink_;
  std::vector<StoredEvent> events;  // reused across batches
  std::vector<std::size_t> index;   // events[k] is batch[index[k]]
  // Events the sink confirmed in a batch that may not have committed (the checkpoint store
  // refused the commit: a full disk, a lost connection; the batch is read again after the
  // backoff): they are not sent again however long the store refuses. A batch that committed
  // never comes back (the inbox skips its ids), so the newest few batches' worth suffice.
  const std::size_t remember = std::max<std::size_t>(1000, 4 * args_.batch);
  std::unordered_set<EventId, EventIdHash> sent;
  std::deque<EventId> sent_order;
  ConsumerHandler deliver = [&](ConsumerBatch& batch) {
    if (moved_.exchange(false)) {
      sent.clear();
      sent_order.clear();
    }
    if (batch.size() == 0) return;  // only duplicates in this read
    events.clear();
    index.clear();
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto& m = batch[i];
      if (!m.event.id.is_nil() && sent.count(m.event.id)) continue;  // confirmed already
      // As read, with its key position (StoredEvent::seq, outpost/key_seq.h): the sink delivers
      // it as the relay's do (docs/consumers.md), where a counter of this bridge went before.
      events.push_back(m.event);
      events.back().attempts = batch.attempt();
      index.push_back(i);
    }
    if (events.empty()) return;
    auto results = sink.deliver(events);
    for (std::size_t k = 0; k < results.size() && k < events.size(); ++k) {
      if (!results[k].ok() || events[k].id.is_nil() || !sent.insert(events[k].id).second) continue;
      sent_order.push_back(events[k].id);
      if (sent_order.size() > remember) {
        sent.erase(sent_order.front());
        sent_order.pop_front();
      }
    }
    // The sink's failure classes (docs/consumers.md, "Failure classes"): unavailable pauses the
    // consumer (no attempt); refused (failed) is an attempt. An event held back behind an
    // unavailable one in the same call is not an attempt either.
    bool down = false;
    for (const auto& r : results) down = down || r.status == DeliveryResult::Status::unavailable;
    for (std::size_t k = 0; k < results.size() && k < index.size(); ++k) {
      const auto& r = results[k];
      const std::size_t i = index[k];
      std::string why = r.error.empty() ? "not delivered" : r.error;
      switch (r.status) {
        case DeliveryResult::Status::delivered:
          break;
        case DeliveryResult::Status::unavailable:
          batch.unavailable(i, std::string(sink.name()) + ": " + why, r.retry_after);
          break;
        case DeliveryResult::Status::skipped:
          if (down) {
            batch.unavailable(i, std::string(sink.name()) + ": " + why);
            break;
          }
          [[fallthrough]];
        case DeliveryResult::Status::failed:
          batch.fail(i, why);
          break;
      }
    }
  };
  try {
    consumer_->run(deliver);
  } catch (...) {
    sink.close();
    throw;
  }
  sink.close();
}

void ConsumeBridge::stop() {
  consumer_->stop();
}

ConsumerCounters ConsumeBridge::counters() const {
  return consumer_->counters();
}

std::string_view ConsumeBridge::sink_name() const {
  return sink_->name();
}

template <class F>
auto ConsumeBridge::with_probe_store(F&& fn, bool read) const
    -> decltype(fn(std::declval<CheckpointStore&>())) {
  std::lock_guard lock(probe_mu_);
  bool again = read && probe_store_;
  for (;;) {
    try {
      if (!probe_store_) probe_store_ = open_checkpoint_store(args_.checkpoint);
      return fn(*probe_store_);
    } catch (...) {
      probe_store_.reset();  // reconnect next time
      if (!again) throw;
      again = false;
    }
  }
}

std::vector<ConsumerDeadLetter> ConsumeBridge::dead(std::size_t limit) const {
  return with_probe_store([&](CheckpointStore& s) { return s.dead(args_.group, limit); }, true);
}

std::size_t ConsumeBridge::retry(std::span<const std::string> ids) const {
  return with_probe_store([&](CheckpointStore& s) { return s.retry(args_.group, ids); });
}

std::size_t ConsumeBridge::discard(std::span<const std::string> ids) const {
  return with_probe_store([&](CheckpointStore& s) { return s.discard(args_.group, ids); });
}

// On the probe's connections; the running consumer notices (consumer_groups.h).
ConsumerProbe::Move ConsumeBridge::seek(const std::string& to, bool reprocess) const {
  const SeekTarget target = parse_seek_target(to, "to");
  return with_probe_store([&](CheckpointStore& s) {
    if (!probe_source_) probe_source_ = open_source(args_.from);
    auto m = seek_consumer_group(s, *probe_source_, args_.group, target, reprocess, "to");
    return Move{m.source, m.from, m.to};
  });
}

DeletedGroup ConsumeBridge::delete_group() const {
  return with_probe_store([&](CheckpointStore& s) {
    if (!probe_source_) probe_source_ = open_source(args_.from);
    return delete_consumer_group(s, *probe_source_, args_.group);
  });
}

ConsumerStatus ConsumeBridge::status() const {
  ConsumerStatus s;
  s.counters = consumer_->counters();
  s.group = args_.group;
  s.source = std::string(source_->name());
  std::string position;
  try {
    auto group = with_probe_store([&](CheckpointStore& c) { return c.group(args_.group); }, true);
    s.dead = group ? group->dead : 0;
    if (group) position = s.position = group->position;
  } catch (const std::exception& e) {
    s.store_error = e.what();
    return s;
  }
  std::lock_guard lock(probe_mu_);
  try {
    if (!probe_source_) probe_source_ = open_source(args_.from);
    s.lag = probe_source_->lag(position);
  } catch (const std::exception& e) {
    s.source_error = e.what();
    probe_source_.reset();
  }
  return s;
}

std::string consume_summary(const ConsumerCounters& c) {
  return "read " + std::to_string(c.read) + ", delivered " + std::to_string(c.handled) +
         ", duplicates " + std::to_string(c.duplicates) + ", failed attempts " +
         std::to_string(c.failures) + ", parked " + std::to_string(c.parked) + ", retried " +
         std::to_string(c.retried) + " (batches " + std::to_string(c.batches) + ", errors " +
         std::to_string(c.errors) + ", pauses " + std::to_string(c.pauses) + ")";
}

Runner add_consume_command(CLI::App& root) {
  auto a = std::make_shared<ConsumeArgs>();
  auto format = std::make_shared<std::string>("text");
  CLI::App* sub = root.add_subcommand(
      "consume",
      "Read a log (file:, ...) from the group's checkpoint and deliver to a sink; the inbox\n"
      "skips ids already delivered; checkpoint and inbox commit after the sink confirms.\n"
      "Runs until SIGTERM/SIGINT (then finishes the batch in flight) or --until-idle.");
  add_setting_flags(sub, *a, consume_settings());
  add_log_format_and_schemes(sub, *format);
  return [a, format] { return run_consume(*a, *format); };
}

}  // namespace outpost::cli
