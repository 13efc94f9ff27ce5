#pragma once
// Opening stores and sinks by URL (DESIGN §6). Only the backends this build was compiled with
// are available; an unsupported scheme is a ConfigError that lists the supported ones.
// Each backend also has its own header with open_<backend>_store(url, options) /
// open_<sink>_sink(url, options), which these dispatch to by scheme.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/sink.h"
#include "outpost/store.h"

namespace outpost {

// sqlite:PATH, sqlite::memory:, memory:, postgresql://..., redis://...
std::unique_ptr<Store> open_store(std::string_view url, const StoreOptions& options = {});
// file:PATH, http(s)://..., kafka://..., redis-stream://..., nats://...
std::unique_ptr<Sink> open_sink(std::string_view url, const SinkOptions& options = {});

std::vector<std::string> store_schemes();
std::vector<std::string> sink_schemes();

}  // namespace outpost
