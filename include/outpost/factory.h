#pragma once
// Opening stores and sinks by URL (docs/cli.md). A scheme is available when its backend is linked
// into the program: each backend library registers its schemes with this registry (CMake target
// outpost::sqlite, pkg-config outpost-sqlite, ...), so a program that links only SQLite gets
// sqlite: (plus memory: and file:, which need no client library) and no other client library.
// An unsupported scheme is a ConfigError that lists the registered ones.
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

// Checks a store URL the way open_store would (supported scheme, path, every parameter) without
// opening, creating or connecting to anything: the CLI calls it before it opens anything, so a
// usage error leaves no file or table behind. Throws the ConfigError open_store would; a scheme
// registered without a checker is checked for its scheme only. Every sink also checks its whole
// URL before it creates or connects anything, so the CLI opens the sink before the store.
void check_store_url(std::string_view url);
// The same for a sink URL, for a program that checks several pipelines before it opens any of
// them (`outpost run`, `outpost check`): the scheme, and the parse-only half of the sink's opener
// where one is registered (the file sink: the URL, and that the file's directory exists; the Kafka
// sink: the URL and its librdkafka properties, no producer made). What
// cannot be known without connecting (a broker that is down) is found when the sink opens.
void check_sink_url(std::string_view url);

// Registered schemes, lowercase, without the colon; built-in ones in a fixed order (the
// embedded default first), others after them in registration order.
std::vector<std::string> store_schemes();
std::vector<std::string> sink_schemes();

// Registering a backend (how the built-in ones do it, usable for your own): call before the
// first open_store/open_sink, typically from a static object's constructor. `scheme` is
// matched case-insensitively; registering a scheme again replaces its opener (and checker).
// A store's `check` is the parse-only half of its opener, used by check_store_url: it throws
// what `open` throws for a bad URL and opens nothing. Thread-safe.
using StoreOpener = std::unique_ptr<Store> (*)(std::string_view url, const StoreOptions& options);
using StoreChecker = void (*)(std::string_view url);
using SinkOpener = std::unique_ptr<Sink> (*)(std::string_view url, const SinkOptions& options);
using SinkChecker = void (*)(std::string_view url);
void register_store_scheme(std::string_view scheme, StoreOpener open, StoreChecker check = nullptr);
void register_sink_scheme(std::string_view scheme, SinkOpener open, SinkChecker check = nullptr);

// The consuming side's sources (include/outpost/source.h) register the same way: each broker
// source lives beside its sink (src/sinks/<backend>/) in its own library (outpost::kafka_source,
// ...), so outpost::consume links no broker client. open_source() (outpost::consume) opens file:
// itself and asks this registry for the rest. `open` throws ConfigError for a bad URL.
class Source;
using SourceOpener = std::unique_ptr<Source> (*)(std::string_view url);
void register_source_scheme(std::string_view scheme, SourceOpener open);
// The opener registered for `scheme` (matched case-insensitively), or null.
SourceOpener find_source_opener(std::string_view scheme);
// Registered source schemes, built-in order first (file: is not registered here).
std::vector<std::string> registered_source_schemes();

}  // namespace outpost
