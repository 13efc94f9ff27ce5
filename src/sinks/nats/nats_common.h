#pragma once
// What the NATS JetStream sink and the NATS source (nats_source.cpp, which reads what the sink
// publishes) share: cnats' owning deleters, its error text, the connection part of
// a nats:// URL, the sink's publishing parameters (the source accepts them too, so one URL serves
// relay and consumer), the connection options both want (reconnect forever) and connecting.

#include <nats/nats.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/url.h"
#include "outpost/error.h"
#include "outpost/event.h"
#include "outpost/sink.h"

namespace outpost::nats {

struct ConnectionDeleter {
  void operator()(natsConnection* nc) const noexcept { natsConnection_Destroy(nc); }
};
struct JsDeleter {
  void operator()(jsCtx* js) const noexcept { jsCtx_Destroy(js); }
};
struct OptionsDeleter {
  void operator()(natsOptions* o) const noexcept { natsOptions_Destroy(o); }
};
using OptionsPtr = std::unique_ptr<natsOptions, OptionsDeleter>;
using ConnectionPtr = std::unique_ptr<natsConnection, ConnectionDeleter>;

// The status' text, with cnats' last error when it says more.
inline std::string status_text(natsStatus s) {
  std::string text = natsStatus_GetText(s);
  const char* last = nats_GetLastError(nullptr);
  if (last && *last && text != last) text += std::string(": ") + last;
  return text;
}

// The servers and credentials of a nats://[user:password@]host:port[,host:port...] URL.
struct Endpoint {
  std::vector<std::string> servers;  // "nats://host:port" each (default port 4222)
  std::string user, password;
  std::string where;  // the redacted URL, for messages
};

// Fills `e`'s servers and credentials from `url`; `bad(what)` makes the ConfigError thrown.
template <typename Bad>
void read_endpoint(const core::Url& url, Endpoint& e, Bad&& bad) {
  if (url.hosts().empty() || url.hosts().front().host.empty()) throw bad("server host missing");
  for (const auto& hp : url.hosts())
    e.servers.push_back("nats://" + hp.host + ":" + std::to_string(hp.port ? hp.port : 4222));
  e.user = url.user();
  e.password = url.password();
}

// The sink's publishing parameters; absent ones take `defaults` (the relay's SinkOptions).
struct Publishing {
  bool create = false;
  std::int64_t max_pending = 4096;
  std::int64_t dup_window_ms = 0;  // for a created stream; 0 = server default (2 min)
  Duration lease{0};
  Duration backoff_max{0};
  bool sync_always = false;  // the user says the server fsyncs before it acks: no warning
};
inline Publishing read_publishing(const core::Url& url, const SinkOptions& defaults) {
  Publishing p;
  p.create = url.bool_param("create").value_or(false);
  p.max_pending = url.int_param("max_pending", 1, 1'000'000).value_or(4096);
  p.dup_window_ms = url.int_param("duplicate_window_ms", 1, std::int64_t{1} << 40).value_or(0);
  p.lease = Duration{
      url.int_param("lease_ms", 0, std::int64_t{1} << 40).value_or(defaults.lease.count())};
  p.backoff_max = Duration{url.int_param("backoff_max_ms", 0, std::int64_t{1} << 40)
                               .value_or(defaults.backoff_max.count())};
  p.sync_always = url.bool_param("sync_always").value_or(false);
  return p;
}

// Options for `e` with `timeout`: the servers, the credentials, and reconnecting forever every
// 250 ms (outages of any length). Null when cnats refuses one: `status` and `step` ("options",
// "servers", "credentials") say which.
inline OptionsPtr connection_options(const Endpoint& e, Duration timeout, natsStatus& status,
                                     const char*& step) {
  natsOptions* raw = nullptr;
  step = "options";
  if ((status = natsOptions_Create(&raw)) != NATS_OK) return nullptr;
  OptionsPtr opts(raw);
  std::vector<const char*> servers;
  for (const auto& s : e.servers) servers.push_back(s.c_str());
  step = "servers";
  status = natsOptions_SetServers(opts.get(), servers.data(), static_cast<int>(servers.size()));
  if (status != NATS_OK) return nullptr;
  step = "credentials";
  if (!e.user.empty() || !e.password.empty())
    status = natsOptions_SetUserInfo(opts.get(), e.user.c_str(), e.password.c_str());
  if (status != NATS_OK) return nullptr;
  natsOptions_SetAllowReconnect(opts.get(), true);
  natsOptions_SetMaxReconnect(opts.get(), -1);
  natsOptions_SetReconnectWait(opts.get(), 250);
  natsOptions_SetTimeout(opts.get(), timeout.count());
  return opts;
}

// A connection to `e` with the options above, which `tweak` (when given) adjusts first. `who`
// ("nats sink nats://h:4222/...") starts each message: ConfigError when cnats refuses an
// option, ConnectionError when no server can be reached.
inline ConnectionPtr connect(const Endpoint& e, Duration timeout, const std::string& who,
                             void (*tweak)(natsOptions*) = nullptr) {
  natsStatus status = NATS_OK;
  const char* step = "";
  OptionsPtr opts = connection_options(e, timeout, status, step);
  if (!opts) throw ConfigError(who + ": " + step + ": " + status_text(status), "nats");
  if (tweak) tweak(opts.get());
  natsConnection* nc = nullptr;
  natsStatus s = natsConnection_Connect(&nc, opts.get());
  if (s != NATS_OK) throw ConnectionError("nats", who + ": connect: " + status_text(s));
  return ConnectionPtr(nc);
}

}  // namespace outpost::nats
