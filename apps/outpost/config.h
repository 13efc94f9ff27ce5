#pragma once
// The daemon's configuration file (`outpost run --config FILE`, `outpost check --config FILE`):
// TOML with an [http] table and any number of [[relay]] and [[consume]] tables. Every `outpost
// relay` flag is a key of [[relay]] under its name with `_` for `-` (--lease-ms -> lease_ms),
// every `outpost consume` flag a key of [[consume]] (--until-idle -> until_idle), with the same
// defaults and limits. String values expand ${NAME} (the environment variable NAME; unset is an
// error), ${NAME:-text} (text when NAME is unset or empty) and $$ (a literal $).
//
//   [log]
//   format = "json"                    # or "text" (default)
//   [http]
//   listen = "127.0.0.1:9100"          # /metrics, /healthz, /readyz; none: no HTTP server
//   admin_token = "${OUTPOST_ADMIN_TOKEN}"
//   allowed_hosts = ["outpost.internal"]  # Host names served besides listen's (and localhost)
//   [[relay]]
//   name = "orders"                    # required, unique, [A-Za-z0-9_.-]{1,64}
//   store = "sqlite:/var/lib/outpost/app.db"
//   sink = "file:/var/lib/outpost/orders.jsonl"
//   batch = 500
//   [[consume]]
//   name = "orders-webhook"            # required, unique among all pipelines
//   from = "file:/var/lib/outpost/orders.jsonl"
//   group = "webhook"
//   checkpoint = "sqlite:/var/lib/outpost/consumers.db"
//   sink = "http://127.0.0.1:8080/events"
//
// Every error is a ConfigError naming the file, the line and the key, e.g.
//   outpost.toml:12: [[relay]] 'orders': key 'batch': must be 1-100000, got 0
// Nothing is opened or connected while loading: URLs are checked for a supported scheme only.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "outpost/relay.h"

namespace outpost::cli {

// One [[relay]] pipeline: the fields of `outpost relay`, same names, defaults and limits.
struct PipelineConfig {
  std::string name;
  std::string store;
  std::string sink;
  std::size_t batch = 100;
  std::int64_t lease_ms = 30'000;
  int max_attempts = 20;  // RelayOptions' defaults: retries span hours (docs/relay.md)
  std::int64_t backoff_base_ms = 1'000;
  std::int64_t backoff_max_ms = 3'600'000;
  int max_crashes = 5;
  std::size_t concurrency = 1;
  std::int64_t deliver_timeout_ms = 0;
  std::int64_t drain_timeout_ms = 0;
  bool unordered = false;
  std::string on_dead = "continue";  // continue | hold (ClaimOrder::strict)
  bool until_empty = false;
  bool quiet = false;
  int line = 0;  // where the [[relay]] table starts, for messages

  bool operator==(const PipelineConfig& other) const;  // every field but `line`
};

// The flags of `outpost consume` (consume.cpp), same defaults; without outpost_consume in the
// build a [[consume]] table is refused.
struct ConsumeArgs {
  std::string from, group, checkpoint, sink;
  std::size_t batch = 100;
  // The relay's retry schedule, kept in one place (RelayOptions; docs/consumers.md).
  int max_attempts = RelayOptions{}.max_attempts;
  std::int64_t backoff_base_ms = RelayOptions{}.backoff_base.count();
  std::int64_t backoff_max_ms = RelayOptions{}.backoff_max.count();
  std::int64_t until_idle_ms = 0;
  bool unordered = false;
  bool quiet = false;

  bool operator==(const ConsumeArgs&) const = default;
};

// One [[consume]] pipeline: the flags of `outpost consume` under their names with '_'.
struct ConsumeConfig {
  std::string name;
  ConsumeArgs args;
  int line = 0;  // where the [[consume]] table starts, for messages

  bool operator==(const ConsumeConfig& other) const {  // every field but `line`
    return name == other.name && args == other.args;
  }
};

// A pipeline of either kind, as the daemon starts, compares (on reload) and stops them.
using AnyPipelineConfig = std::variant<PipelineConfig, ConsumeConfig>;

struct HttpConfig {
  std::string listen;       // HOST:PORT; empty: no HTTP server
  std::string admin_token;  // empty: read-only endpoints
  // Host names the HTTP server answers to besides its listen address and, for a loopback
  // listen address, localhost: a proxy's or DNS name (docs/operations.md, "HTTP endpoints"). "*"
  // answers any (no protection against DNS rebinding).
  std::vector<std::string> allowed_hosts;
};

struct DaemonConfig {
  std::string file;
  std::string log_format = "text";  // [log] format: "text" or "json" (--log-format overrides)
  HttpConfig http;
  std::vector<PipelineConfig> relays;
  std::vector<ConsumeConfig> consumers;

  // Every pipeline, relays first, in file order within each kind.
  std::vector<AnyPipelineConfig> pipelines() const;
};
const std::string& pipeline_name(const AnyPipelineConfig& p);

// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_environment();

// Reads and validates FILE. Throws ConfigError (file:line: what) on the first problem.
DaemonConfig load_config(const std::string& file, const EnvLookup& env = process_environment());
// The same for text already read (`file` is used in messages only).
DaemonConfig parse_config(const std::string& text, const std::string& file,
                          const EnvLookup& env = process_environment());

// ${NAME}, ${NAME:-default} and $$ in `value`; throws ConfigError naming `where` and the variable.
std::string expand_env(const std::string& value, const std::string& where, const EnvLookup& env);

}  // namespace outpost::cli
