#include "metrics.h"

#include <httplib.h>

#include <arpa/inet.h>

#include <atomic>
#include <cctype>
#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli.h"
#include "dashboard.h"
#include "error_log.h"
#include "log.h"
#include "outpost/error.h"

#ifndef OUTPOST_VERSION
#define OUTPOST_VERSION "unknown"
#endif

namespace outpost::cli {
namespace {

// Longest a pipeline's loop may go without any store or sink call before /readyz calls it stuck.
// The relay calls the store at least every poll interval (1 s) and renews leases every lease/3;
// a consumer reads its log at least every poll (500 ms) and calls the sink on every attempt.
constexpr std::chrono::seconds kLoopStuckAfter{120};

// The server's budget (docs/operations.md, "HTTP endpoints"): requests are small (a mutation's
// body is a pipeline name and a list of ids or a filter), and probes and scrapes must answer
// while a few clients are slow or hostile. A connection holds one of kThreads while it is read;
// each read waits at most kReadTimeout for the next bytes.
constexpr std::size_t kMaxBody = 1 << 20;  // 1 MiB
constexpr std::size_t kThreads = 32;
constexpr std::chrono::seconds kReadTimeout{3};
constexpr std::chrono::seconds kKeepAlive{2};

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "name" of "name:port", "[v6]:port", "name" or "[v6]", lowercased, brackets removed.
std::string host_name(const std::string& host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return close == std::string::npos ? std::string() : lowercase(host.substr(1, close - 1));
  }
  auto colon = host.find(':');
  if (colon != std::string::npos && host.find(':', colon + 1) != std::string::npos)
    return lowercase(host);  // a bare IPv6 address (listen hosts are written so)
  return lowercase(host.substr(0, colon));
}

bool is_ip_literal(const std::string& name) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

bool is_loopback(const std::string& name) {
  in_addr v4{};
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return name == "::1" || name == "localhost";
}

// Refusals are logged, thinned out as delivery errors are (error_log.h): an attacker's flood
// must not flood the log.
void log_refusal(const std::string& what) {
  static std::atomic<std::uint64_t> refusals{0};
  auto n = refusals.fetch_add(1) + 1;
  if (error_is_printed(n)) log(what + errors_so_far(n), "", spdlog::level::warn);
}

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

std::vector<Scrape> scrape(const std::vector<PipelineView>& pipelines) {
  std::vector<Scrape> out;
  for (const auto& p : pipelines) {
    if (p.consumer) continue;  // consumer_families()
    Scrape s{&p, p.store ? std::string(p.store->backend()) : "", {}, std::nullopt, {}};
    if (p.relay) s.counters = p.relay->counters();
    if (p.store) {
      try {
        s.stats = p.store->stats();
      } catch (const std::exception& e) {
        s.store_error = redact(e.what());
      }
    }
    out.push_back(std::move(s));
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

std::vector<ConsumerScrape> scrape_consumers(const std::vector<PipelineView>& pipelines) {
  std::vector<ConsumerScrape> out;
  for (const auto& p : pipelines) {
    if (!p.consumer) continue;
    ConsumerScrape c{&p, p.consumer->status(), {}};
    c.labels = consumer_labels(p, c.status);
    out.push_back(std::move(c));
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
           "1 if the last checkpoint store query succeeded.", up);
}

}  // namespace

std::string metrics_text(const std::vector<PipelineView>& pipelines) {
  auto ss = scrape(pipelines);
  auto cs = scrape_consumers(pipelines);
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
    t.family("outpost_store_up", "gauge", "1 if the last store stats query succeeded.", up);
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

std::string sink_down_reason(const PipelineView& p) {
  if (!p.running) return {};
  if (p.relay) {
    auto c = p.relay->counters();
    if (!c.sink_down) return {};
    std::string error = p.metrics ? p.metrics->last_error() : std::string();
    return "down since " + format_rfc3339(c.sink_down_since) + (error.empty() ? "" : ": " + error);
  }
  if (p.metrics && p.metrics->last_delivery_failed.load())
    return "the last batch failed: " + p.metrics->last_error();
  return {};
}

Readiness readiness(const std::vector<PipelineView>& pipelines, bool shutting_down) {
  nlohmann::json failing = nlohmann::json::array();
  nlohmann::json degraded = nlohmann::json::array();
  auto fail = [&](const std::string& pipeline, const char* check, const std::string& error) {
    failing.push_back({{"pipeline", pipeline}, {"check", check}, {"error", redact(error)}});
  };
  if (shutting_down) fail("", "shutting_down", "the daemon is draining and will exit");
  for (const auto& p : pipelines) {
    if (!p.started) {
      fail(p.name, "started", p.failure);
      continue;
    }
    if (!p.running) {
      if (!p.failure.empty()) fail(p.name, "loop_alive", p.failure);
      continue;  // a pipeline that finished (until_empty) is not a failure
    }
    if (p.store) {
      try {
        (void)p.store->stats();
      } catch (const std::exception& e) {
        fail(p.name, "store_connected", e.what());
      }
    }
    if (p.consumer) {
      auto s = p.consumer->status();
      if (!s.store_error.empty()) fail(p.name, "store_connected", s.store_error);
      if (!s.source_error.empty()) fail(p.name, "source_connected", s.source_error);
    }
    if (auto why = sink_down_reason(p); !why.empty())
      degraded.push_back(
          {{"pipeline", p.name}, {"check", "sink_delivering"}, {"error", redact(why)}});
    if (p.metrics) {
      if (p.metrics->delivering.load() == 0 && p.metrics->idle_for() > kLoopStuckAfter)
        fail(p.name, "loop_alive",
             "no store or sink call for " + std::to_string(p.metrics->idle_for().count() / 1000) +
                 " s");
    }
  }
  Readiness r;
  r.ready = failing.empty();
  r.json = nlohmann::json{{"ready", r.ready}, {"failing", failing}, {"degraded", degraded}}.dump();
  return r;
}

bool host_allowed(const std::string& host_header, const std::string& listen_host,
                  const std::vector<std::string>& allowed) {
  const std::string name = host_name(host_header);
  if (name.empty()) return false;
  for (const auto& a : allowed)
    if (a == "*" || host_name(a) == name) return true;
  const std::string listen = host_name(listen_host);
  if (name == listen) return true;
  if (listen.empty() || listen == "0.0.0.0" || listen == "::")
    return is_ip_literal(name) || name == "localhost";
  if (is_loopback(listen)) return name == "localhost" || name == "127.0.0.1" || name == "::1";
  return false;
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
  int port = 0;
};

MetricsServer::MetricsServer(const std::string& addr, PipelineSource& source,
                             const std::string& flag)
    : impl_(std::make_unique<Impl>()) {
  start(addr, source, flag);
}

void MetricsServer::start(const std::string& addr, PipelineSource& source,
                          const std::string& flag) {
  auto [host, port] = parse_listen_address(addr, flag);

  httplib::Server& server = impl_->server;
  server.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  server.set_read_timeout(kReadTimeout);
  server.set_write_timeout(kReadTimeout);
  server.set_keep_alive_timeout(kKeepAlive.count());
  server.set_payload_max_length(kMaxBody);
  // Before any route and before a body is read: the Host rule, then a mutation's guard (token,
  // same origin), so an unauthenticated POST is answered without reading what it sends.
  server.set_pre_routing_handler(
      [&source, host](const httplib::Request& req, httplib::Response& res) {
        // The dashboard and its API (dead letters' payloads and headers, mutations) are what a
        // DNS-rebinding page would read; /metrics, /healthz and /readyz carry no event data and
        // are served to any Host, so a scraper or probe that names the server by a DNS name
        // (relay --metrics 0.0.0.0:PORT has no allowed_hosts) keeps working.
        const bool dashboard = req.path == "/" || req.path.rfind("/api/", 0) == 0;
        const std::string requested = req.get_header_value("Host");
        if (dashboard && !host_allowed(requested, host, source.allowed_hosts())) {
          log_refusal("http: refused " + req.method + " " + req.path + " from " + req.remote_addr +
                      ": Host '" + requested +
                      "' is not this server's (add it to [http] allowed_hosts if it is)");
          res.status = 403;
          res.set_header("Connection", "close");
          res.set_content("{\"error\":\"Host not allowed\"}", "application/json");
          return httplib::Server::HandlerResponse::Handled;
        }
        std::string refusal;
        if (refuse_before_body(req, res, source, refusal)) {
          log_refusal("dashboard: refused " + req.method + " " + req.path + " from " +
                      req.remote_addr + ": " + std::to_string(res.status) + " " + refusal);
          res.set_header("Connection", "close");
          return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });

  server.Get("/metrics", [&source](const httplib::Request&, httplib::Response& res) {
    res.set_content(redact(metrics_text(source.pipelines())), "text/plain; version=0.0.4");
  });
  // Liveness: the process answers; draining is still alive (a restart would lose the drain).
  impl_->server.Get("/healthz", [&source](const httplib::Request&, httplib::Response& res) {
    res.set_content(source.shutting_down() ? "ok (draining)\n" : "ok\n", "text/plain");
  });
  impl_->server.Get("/readyz", [&source](const httplib::Request&, httplib::Response& res) {
    auto r = readiness(source.pipelines(), source.shutting_down());
    res.status = r.ready ? 200 : 503;
    res.set_content(r.json + "\n", "application/json");
  });
  add_dashboard_routes(impl_->server, source);
  if (port == 0) {
    impl_->port = impl_->server.bind_to_any_port(host.c_str());
  } else {
    impl_->port = impl_->server.bind_to_port(host.c_str(), port) ? port : -1;
  }
  if (impl_->port <= 0)
    throw Error(ErrorCode::connection, "metrics", flag + ": cannot listen on " + addr);
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
}

MetricsServer::~MetricsServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int MetricsServer::port() const {
  return impl_->port;
}

}  // namespace outpost::cli
