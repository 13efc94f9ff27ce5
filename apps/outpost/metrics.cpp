#include "metrics.h"

#include <httplib.h>

#include <charconv>
#include <optional>

#include "bounded_read.h"
#include "cli.h"
#include "http_server.h"

#ifndef OUTPOST_VERSION
#define OUTPOST_VERSION "unknown"
#endif

namespace outpost::cli {
namespace {

std::string number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, end) : "NaN";
}

std::string escape_label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// {pipeline="..",store="..",sink=".."}: bounded labels only.
std::string labels(const PipelineView& p, const std::string& store, const std::string& extra = "") {
  std::string out = "{pipeline=\"" + escape_label(p.name) + "\"";
  if (!store.empty()) out += ",store=\"" + escape_label(store) + "\"";
  if (!p.sink.empty()) out += ",sink=\"" + escape_label(p.sink) + "\"";
  if (!extra.empty()) out += "," + extra;
  return out + "}";
}

struct Scrape {
  const PipelineView* view;
  std::string store_backend;
  RelayCounters counters;
  std::optional<StoreStats> stats;
  std::string store_error;
};

class Text {
 public:
  void family(const char* name, const char* type, const char* help,
              const std::vector<std::pair<std::string, std::string>>& samples) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto& [labels, value] : samples) out_ += name + labels + " " + value + "\n";
  }
  void histogram(const char* name, const char* help,
                 const std::vector<std::pair<const Scrape*, Histogram::Snapshot>>& series) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
    for (const auto& [s, h] : series) {
      for (std::size_t i = 0; i < h.bounds.size(); ++i)
        out_ += std::string(name) + "_bucket" +
                labels(*s->view, s->store_backend, "le=\"" + number(h.bounds[i]) + "\"") + " " +
                std::to_string(h.cumulative[i]) + "\n";
      out_ += std::string(name) + "_bucket" + labels(*s->view, s->store_backend, "le=\"+Inf\"") +
              " " + std::to_string(h.count) + "\n";
      out_ += std::string(name) + "_sum" + labels(*s->view, s->store_backend) + " " +
              number(h.sum) + "\n";
      out_ += std::string(name) + "_count" + labels(*s->view, s->store_backend) + " " +
              std::to_string(h.count) + "\n";
    }
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Every pipeline's store is read at once, each within kReadBudget (bounded_read.h): a store
// that hangs is reported down (outpost_store_up 0) and holds up neither the scrape nor the
// other pipelines.
std::vector<Scrape> scrape(const std::vector<PipelineView>& pipelines,
                           std::chrono::steady_clock::time_point deadline) {
  std::vector<Scrape> out;
  std::vector<std::optional<BoundedReads<StoreStats>::Pending>> reads;
  for (const auto& p : pipelines) {
    if (p.consumer) continue;  // consumer_families()
    Scrape s{&p, p.store ? std::string(p.store->backend()) : "", {}, std::nullopt, {}};
    if (p.relay) s.counters = p.relay->counters();
    reads.emplace_back();
    if (OutboxAdmin* store = p.store)
      reads.back() =
          store_reads().start(read_key(p, store), p.keepalive, [store] { return store->stats(); });
    out.push_back(std::move(s));
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!reads[i]) continue;
    auto r = store_reads().finish(*reads[i], deadline);
    if (r.fresh && r.value)
      out[i].stats = std::move(r.value);
    else
      out[i].store_error = redact(r.error);
  }
  return out;
}

void add_counter(Text& t, const std::vector<Scrape>& ss, const char* name, const char* help,
                 std::uint64_t RelayCounters::*field) {
  std::vector<std::pair<std::string, std::string>> samples;
  for (const auto& s : ss)
    samples.emplace_back(labels(*s.view, s.store_backend), std::to_string(s.counters.*field));
  t.family(name, "counter", help, samples);
}

void add_gauge(Text& t, const std::vector<Scrape>& ss, const char* name, const char* help,
               double (*value)(const StoreStats&)) {
  std::vector<std::pair<std::string, std::string>> samples;
  for (const auto& s : ss)
    if (s.stats) samples.emplace_back(labels(*s.view, s.store_backend), number(value(*s.stats)));
  if (!samples.empty()) t.family(name, "gauge", help, samples);
}

void add_histogram(Text& t, const std::vector<Scrape>& ss, const char* name, const char* help,
                   const Histogram PipelineMetrics::*field) {
  std::vector<std::pair<const Scrape*, Histogram::Snapshot>> series;
  for (const auto& s : ss)
    if (s.view->metrics) series.emplace_back(&s, (s.view->metrics->*field).snapshot());
  if (!series.empty()) t.histogram(name, help, series);
}

// {pipeline="..",source="..",sink=".."} of a consume pipeline.
std::string consumer_labels(const PipelineView& p, const ConsumerStatus& s) {
  return "{pipeline=\"" + escape_label(p.name) + "\",source=\"" + escape_label(s.source) +
         "\",sink=\"" + escape_label(p.sink) + "\"}";
}

struct ConsumerScrape {
  const PipelineView* view;
  ConsumerStatus status;
  std::string labels;
};

std::vector<ConsumerScrape> scrape_consumers(const std::vector<PipelineView>& pipelines,
                                             std::chrono::steady_clock::time_point deadline) {
  std::vector<ConsumerScrape> out;
  std::vector<BoundedReads<ConsumerStatus>::Pending> reads;
  for (const auto& p : pipelines) {
    if (!p.consumer) continue;
    const ConsumerProbe* probe = p.consumer;
    reads.push_back(consumer_reads().start(read_key(p, probe), p.keepalive,
                                           [probe] { return probe->status(); }));
    out.push_back({&p, {}, {}});
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].status = bounded_status(consumer_reads().finish(reads[i], deadline));
    out[i].labels = consumer_labels(*out[i].view, out[i].status);
  }
  return out;
}

void consumer_families(Text& t, const std::vector<ConsumerScrape>& cs) {
  if (cs.empty()) return;
  auto counter = [&](const char* name, const char* help, std::uint64_t ConsumerCounters::*field) {
    std::vector<std::pair<std::string, std::string>> samples;
    for (const auto& c : cs)
      samples.emplace_back(c.labels, std::to_string(c.status.counters.*field));
    t.family(name, "counter", help, samples);
  };
  counter("outpost_consumer_batches_total", "Batches committed.", &ConsumerCounters::batches);
  counter("outpost_consumer_read_total", "Messages read from the log.", &ConsumerCounters::read);
  counter("outpost_consumer_delivered_total", "Messages delivered to the sink and committed.",
          &ConsumerCounters::handled);
  counter("outpost_consumer_duplicates_total", "Messages the inbox skipped as already delivered.",
          &ConsumerCounters::duplicates);
  counter("outpost_consumer_failed_total", "Delivery attempts that failed.",
          &ConsumerCounters::failures);
  counter("outpost_consumer_parked_total", "Messages moved to the consumer dead letters.",
          &ConsumerCounters::parked);
  counter("outpost_consumer_retried_total", "Dead letters delivered after an operator's retry.",
          &ConsumerCounters::retried);
  counter("outpost_consumer_errors_total", "Log or checkpoint store errors the consumer survived.",
          &ConsumerCounters::errors);
  std::vector<std::pair<std::string, std::string>> lag, dead, up;
  for (const auto& c : cs) {
    if (c.status.lag) lag.emplace_back(c.labels, std::to_string(*c.status.lag));
    if (c.status.dead) dead.emplace_back(c.labels, std::to_string(*c.status.dead));
    up.emplace_back(c.labels, c.status.dead ? "1" : "0");
  }
  if (!lag.empty())
    t.family("outpost_consumer_lag_messages", "gauge",
             "Messages in the log after the group's committed checkpoint.", lag);
  if (!dead.empty())
    t.family("outpost_consumer_dead", "gauge", "Consumer dead letters of the group.", dead);
  t.family("outpost_consumer_checkpoint_up", "gauge",
           "1 if this scrape's checkpoint store query succeeded within the read budget (1.5 s).",
           up);
}

}  // namespace

std::string metrics_text(const std::vector<PipelineView>& pipelines) {
  const auto deadline = std::chrono::steady_clock::now() + kReadBudget;
  auto ss = scrape(pipelines, deadline);
  auto cs = scrape_consumers(pipelines, deadline);
  Text t;
  add_counter(t, ss, "outpost_relay_batches_total", "Batches claimed.", &RelayCounters::batches);
  add_counter(t, ss, "outpost_relay_claimed_total", "Events claimed.", &RelayCounters::claimed);
  add_counter(t, ss, "outpost_relay_delivered_total", "Events delivered and acknowledged.",
              &RelayCounters::delivered);
  add_counter(t, ss, "outpost_relay_failed_total", "Delivery attempts that failed.",
              &RelayCounters::failed);
  add_counter(t, ss, "outpost_relay_dead_total", "Events moved to the dead letters.",
              &RelayCounters::dead);
  add_counter(t, ss, "outpost_relay_released_total", "Events released without an attempt.",
              &RelayCounters::released);
  add_counter(t, ss, "outpost_relay_lease_lost_total", "Batches abandoned after losing the lease.",
              &RelayCounters::lease_lost);
  add_counter(t, ss, "outpost_relay_store_errors_total", "Store errors the relay survived.",
              &RelayCounters::store_errors);
  {
    std::vector<std::pair<std::string, std::string>> up, running;
    for (const auto& s : ss) {
      up.emplace_back(labels(*s.view, s.store_backend), s.stats ? "1" : "0");
      running.emplace_back(labels(*s.view, s.store_backend), s.view->running ? "1" : "0");
    }
    for (const auto& c : cs) running.emplace_back(c.labels, c.view->running ? "1" : "0");
    t.family("outpost_store_up", "gauge",
             "1 if this scrape's store stats query succeeded within the read budget (1.5 s).", up);
    t.family("outpost_pipeline_running", "gauge",
             "1 while the pipeline's relay or consumer loop runs.", running);
  }
  add_gauge(t, ss, "outpost_store_pending", "Undelivered events not leased (the backlog).",
            [](const StoreStats& s) { return double(s.pending); });
  add_gauge(t, ss, "outpost_store_scheduled",
            "Events held until their deliver_at (not in pending until then).",
            [](const StoreStats& s) { return double(s.scheduled); });
  add_gauge(t, ss, "outpost_store_leased", "Events under a live lease.",
            [](const StoreStats& s) { return double(s.leased); });
  add_gauge(t, ss, "outpost_store_dead", "Dead letters.",
            [](const StoreStats& s) { return double(s.dead); });
  add_gauge(t, ss, "outpost_store_archived", "Events in the archive.",
            [](const StoreStats& s) { return double(s.archived); });
  add_gauge(t, ss, "outpost_store_oldest_pending_age_seconds",
            "Age of the oldest undelivered event.",
            [](const StoreStats& s) { return double(s.oldest_pending_age.count()) / 1000.0; });
  add_histogram(t, ss, "outpost_relay_claim_seconds", "Time of one claim from the store.",
                &PipelineMetrics::claim_seconds);
  add_histogram(t, ss, "outpost_relay_deliver_seconds", "Time of one batch delivery to the sink.",
                &PipelineMetrics::deliver_seconds);
  add_histogram(t, ss, "outpost_relay_settle_seconds",
                "Time of one settlement (ack/nack/release, or settle and claim the next batch).",
                &PipelineMetrics::settle_seconds);
  add_histogram(t, ss, "outpost_relay_batch_size", "Events per claimed (non-empty) batch.",
                &PipelineMetrics::batch_size);
  add_histogram(t, ss, "outpost_relay_time_in_outbox_seconds",
                "Time from emit (the event's occurred_at) to ack, per delivered event.",
                &PipelineMetrics::outbox_seconds);
  consumer_families(t, cs);
  // One constant sample, as Prometheus exporters do, so dashboards can join on the version.
  t.family("outpost_build_info", "gauge", "The outpost build serving these metrics.",
           {{"{version=\"" + escape_label(OUTPOST_VERSION) + "\"}", "1"}});
  std::string out = t.take();
  for (const auto& s : ss)
    if (!s.store_error.empty()) {
      out += "# store error (" + s.view->name + "): ";
      for (char ch : s.store_error) out += (ch == '\n' ? ' ' : ch);
      out += "\n";
    }
  for (const auto& c : cs)
    for (const auto& error : {c.status.store_error, c.status.source_error})
      if (!error.empty()) {
        out += "# consumer error (" + c.view->name + "): ";
        for (char ch : redact(error)) out += (ch == '\n' ? ' ' : ch);
        out += "\n";
      }
  return out;
}

void add_metrics_routes(HttpServer& server, PipelineSource& source) {
  server.probe("/metrics", [&source](const httplib::Request&, httplib::Response& res) {
    res.set_content(redact(metrics_text(source.pipelines())), "text/plain; version=0.0.4");
  });
}

}  // namespace outpost::cli
