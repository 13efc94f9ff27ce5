#pragma once
// Opening stores and sinks by URL (DESIGN §6). Only the backends this build was compiled with
// are available; an unsupported scheme is a ConfigError that lists the supported ones.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/sink.h"
#include "outpost/store.h"

namespace outpost {

struct SinkOptions {
  std::size_t concurrency = 1;  // parallel deliveries (HTTP requests) with per-key order kept
  Duration timeout{10'000};     // per-request / per-flush timeout
};

// sqlite:PATH, sqlite::memory:, memory:, postgresql://..., redis://...
std::unique_ptr<Store> open_store(std::string_view url, const StoreOptions& options = {});
// file:PATH, http(s)://..., kafka://..., redis-stream://..., nats://...
std::unique_ptr<Sink> open_sink(std::string_view url, const SinkOptions& options = {});

std::vector<std::string> store_schemes();
std::vector<std::string> sink_schemes();

}  // namespace outpost
