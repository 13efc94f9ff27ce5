#pragma once
// The relay's HTTP endpoint (`outpost relay --metrics ADDR`): /metrics in the Prometheus text
// format (relay counters + store stats) and /healthz. Runs on its own thread.

#include <memory>
#include <string>

#include "outpost/relay.h"
#include "outpost/store.h"

namespace outpost::cli {

class MetricsServer {
 public:
  // `addr` is HOST:PORT (port 0 picks a free one). Throws ConfigError for a malformed address
  // (naming --metrics) and Error(connection) when it cannot bind. `relay` and `store` must
  // outlive the server.
  MetricsServer(const std::string& addr, const Relay& relay, Store& store);
  ~MetricsServer();  // stops serving and joins
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The Prometheus text for one scrape (exposed for tests of the format).
std::string metrics_text(const RelayCounters& counters, const StoreStats* stats,
                         const std::string& store_error);

}  // namespace outpost::cli
