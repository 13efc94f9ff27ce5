#include "metrics.h"

#include <httplib.h>

#include <charconv>
#include <thread>

#include "cli.h"
#include "outpost/error.h"

namespace outpost::cli {
namespace {

void counter(std::string& out, const char* name, const char* help, std::uint64_t v) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
         " " + std::to_string(v) + "\n";
}

void gauge(std::string& out, const char* name, const char* help, double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " +
         std::string(buf, end) + "\n";
}

}  // namespace

std::string metrics_text(const RelayCounters& c, const StoreStats* s,
                         const std::string& store_error) {
  std::string out;
  counter(out, "outpost_relay_batches_total", "Batches claimed.", c.batches);
  counter(out, "outpost_relay_claimed_total", "Events claimed.", c.claimed);
  counter(out, "outpost_relay_delivered_total", "Events delivered and acknowledged.", c.delivered);
  counter(out, "outpost_relay_failed_total", "Delivery attempts that failed.", c.failed);
  counter(out, "outpost_relay_dead_total", "Events moved to the dead letters.", c.dead);
  counter(out, "outpost_relay_released_total", "Events released without an attempt.", c.released);
  counter(out, "outpost_relay_lease_lost_total", "Batches abandoned after losing the lease.",
          c.lease_lost);
  counter(out, "outpost_relay_store_errors_total", "Store errors the relay survived.",
          c.store_errors);
  gauge(out, "outpost_store_up", "1 if the last store stats query succeeded.", s ? 1 : 0);
  if (s) {
    gauge(out, "outpost_store_pending", "Undelivered events not leased.", double(s->pending));
    gauge(out, "outpost_store_leased", "Events under a live lease.", double(s->leased));
    gauge(out, "outpost_store_dead", "Dead letters.", double(s->dead));
    gauge(out, "outpost_store_archived", "Events in the archive.", double(s->archived));
    gauge(out, "outpost_store_oldest_pending_age_seconds", "Age of the oldest undelivered event.",
          double(s->oldest_pending_age.count()) / 1000.0);
  } else if (!store_error.empty()) {
    out += "# store error: ";
    for (char ch : store_error) out += (ch == '\n' ? ' ' : ch);
    out += "\n";
  }
  return out;
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
  int port = 0;
};

MetricsServer::MetricsServer(const std::string& addr, const Relay& relay, Store& store)
    : impl_(std::make_unique<Impl>()) {
  auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    throw ConfigError("--metrics '" + addr + "' must be HOST:PORT, e.g. 127.0.0.1:9100");
  std::string host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int port = -1;
  auto ps = addr.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(ps.data(), ps.data() + ps.size(), port);
  if (ec != std::errc{} || ptr != ps.data() + ps.size() || port < 0 || port > 65535)
    throw ConfigError("--metrics '" + addr + "': port '" + ps + "' is not 0-65535");

  impl_->server.Get("/metrics", [&relay, &store](const httplib::Request&, httplib::Response& res) {
    StoreStats stats;
    bool ok = false;
    std::string err;
    try {
      stats = store.stats();
      ok = true;
    } catch (const std::exception& e) {
      err = redact(e.what());
    }
    res.set_content(metrics_text(relay.counters(), ok ? &stats : nullptr, err),
                    "text/plain; version=0.0.4");
  });
  impl_->server.Get("/healthz", [&store](const httplib::Request&, httplib::Response& res) {
    try {
      (void)store.stats();
      res.set_content("ok\n", "text/plain");
    } catch (const std::exception& e) {
      res.status = 503;
      res.set_content("store unavailable: " + redact(e.what()) + "\n", "text/plain");
    }
  });
  if (port == 0) {
    impl_->port = impl_->server.bind_to_any_port(host.c_str());
  } else {
    impl_->port = impl_->server.bind_to_port(host.c_str(), port) ? port : -1;
  }
  if (impl_->port <= 0)
    throw Error(ErrorCode::connection, "metrics", "--metrics: cannot listen on " + addr);
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
