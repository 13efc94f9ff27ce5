#include "dashboard.h"

#include <httplib.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "dashboard_html.h"  // kDashboardHtml, generated from dashboard.html at build time
#include "event_state_json.h"
#include "log.h"
#include "metrics.h"
#include "outpost/json.h"

namespace outpost::cli {
namespace {

using nlohmann::json;

// Largest number of dead letters one request reads from a store.
constexpr std::size_t kMaxDead = 10'000;

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(body.dump(), "application/json");
}

void error(httplib::Response& res, int status, const std::string& message) {
  reply(res, status, json{{"error", redact(message)}});
}

const PipelineView* find(const std::vector<PipelineView>& views, const std::string& name) {
  for (const auto& v : views)
    if (v.name == name) return &v;
  return nullptr;
}

struct Filter {
  std::string type, key, error;
  bool matches(const DeadEvent& e) const {
    return (type.empty() || e.type == type) &&
           (key.empty() || e.key.find(key) != std::string::npos) &&
           (error.empty() || e.last_error.find(error) != std::string::npos);
  }
};

std::vector<DeadEvent> matching(Store& store, const Filter& f, std::size_t limit) {
  std::vector<DeadEvent> out;
  for (auto& e : store.dead(kMaxDead)) {
    if (!f.matches(e)) continue;
    out.push_back(std::move(e));
    if (out.size() >= limit) break;
  }
  return out;
}

json dead_json(const DeadEvent& e) {
  json j = json::parse(to_json(static_cast<const StoredEvent&>(e)), nullptr, false);
  if (j.is_discarded()) j = json::object();
  j["last_error"] = redact(e.last_error);
  j["dead_at"] = format_rfc3339(e.dead_at);
  return j;
}

// Largest number of events one blocked-keys or leases request reads from a store.
constexpr std::size_t kMaxInspect = 1'000;

// The leased events grouped by the claim holding them (its LeaseToken), oldest claim first.
// Stores keep no renewal time: `renewed_est` is the expiry minus this pipeline's lease length
// (exact when the holder runs with the same lease, as the relays of one pipeline do).
json holders_json(const std::vector<EventState>& leased, TimePoint at, Duration lease) {
  json holders = json::array();
  std::map<std::string, std::size_t> index;
  for (const auto& e : leased) {
    auto [it, fresh] = index.emplace(e.lease_owner, holders.size());
    if (fresh)
      holders.push_back(json{{"owner", e.lease_owner},
                             {"fence", e.fence},
                             {"events", 0},
                             {"keys", json::array()},
                             {"first_seq", e.seq},
                             {"lease_until", format_rfc3339(*e.lease_until)},
                             {"lease_expires_in_s", double((*e.lease_until - at).count()) / 1e6},
                             {"renewed_est", format_rfc3339(*e.lease_until - lease)}});
    json& h = holders[it->second];
    h["events"] = h["events"].get<int>() + 1;
    h["last_seq"] = e.seq;
    auto& keys = h["keys"];
    if (!e.key.empty() && keys.size() < 20 &&
        std::find(keys.begin(), keys.end(), e.key) == keys.end())
      keys.push_back(e.key);
  }
  return holders;
}

// A consume pipeline's group: where it stands (position, lag, dead letters) and its counters.
json consumer_json(const ConsumerStatus& s) {
  const ConsumerCounters& c = s.counters;
  json j{{"group", s.group},     {"source", s.source},     {"position", s.position},
         {"read", c.read},       {"delivered", c.handled}, {"duplicates", c.duplicates},
         {"failed", c.failures}, {"parked", c.parked},     {"retried", c.retried},
         {"errors", c.errors}};
  if (s.lag) j["lag"] = *s.lag;
  if (s.dead) j["dead"] = *s.dead;
  if (!s.store_error.empty()) j["store_error"] = redact(s.store_error);
  if (!s.source_error.empty()) j["source_error"] = redact(s.source_error);
  return j;
}

// ?limit= within [1, kMaxInspect] (default 100); false with a 400 reply when malformed.
bool inspect_limit(const httplib::Request& req, httplib::Response& res, std::size_t& limit) {
  limit = 100;
  if (!req.has_param("limit")) return true;
  try {
    limit = std::clamp<std::size_t>(std::stoul(req.get_param_value("limit")), 1, kMaxInspect);
    return true;
  } catch (const std::exception&) {
    error(res, 400, "limit must be a number");
    return false;
  }
}

// Same-origin JSON only; see dashboard.h.
std::string cross_site_reason(const httplib::Request& req) {
  if (req.has_header("Sec-Fetch-Site")) {
    auto site = req.get_header_value("Sec-Fetch-Site");
    if (site != "same-origin" && site != "none") return "Sec-Fetch-Site: " + site;
  }
  if (req.has_header("Origin")) {
    auto origin = req.get_header_value("Origin");
    auto host = req.get_header_value("Host");
    if (origin != "http://" + host && origin != "https://" + host) return "Origin " + origin;
  }
  auto type = req.get_header_value("Content-Type");
  if (type.rfind("application/json", 0) != 0) return "Content-Type must be application/json";
  return {};
}

// 0 when the request may mutate, else the HTTP status to refuse it with (message in `why`).
int refuse_mutation(const httplib::Request& req, const std::string& token, std::string& why) {
  if (auto reason = cross_site_reason(req); !reason.empty()) {
    why = "cross-site request refused (" + reason + ")";
    return 403;
  }
  if (token.empty()) {
    why = "read-only: no admin token is configured ([http] admin_token)";
    return 403;
  }
  auto auth = req.get_header_value("Authorization");
  // Constant-time comparison: the token is a secret.
  std::string expected = "Bearer " + token;
  bool same = auth.size() == expected.size();
  unsigned char diff = 0;
  for (std::size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>(expected[i] ^ (i < auth.size() ? auth[i] : 0));
  if (!same || diff != 0) {
    why = auth.empty() ? "admin token required (Authorization: Bearer ...)" : "wrong admin token";
    return 401;
  }
  return 0;
}

// Every mutation is logged with its pipeline, what it asked (ids or filter), its outcome and
// who asked (docs/operations.md, "The operator dashboard").
void audit(const httplib::Request& req, const std::string& pipeline, const std::string& what) {
  log("dashboard: " + what + " (from " + req.remote_addr + ")", pipeline);
}

void mutate(PipelineSource& source, const httplib::Request& req, httplib::Response& res,
            bool retry) {
  std::string why;
  if (int status = refuse_mutation(req, source.admin_token(), why)) return error(res, status, why);
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("pipeline") || !body["pipeline"].is_string())
    return error(res, 400, "body must be a JSON object with \"pipeline\"");
  auto views = source.pipelines();
  const PipelineView* p = find(views, body["pipeline"].get<std::string>());
  if (!p || !p->store) return error(res, 404, "no such pipeline");
  std::vector<EventId> ids;
  std::string what;  // for the log: "3 id(s)" or "by filter {...}"
  if (body.contains("ids")) {
    if (!body["ids"].is_array()) return error(res, 400, "\"ids\" must be an array");
    for (const auto& v : body["ids"]) {
      auto id = v.is_string() ? EventId::parse(v.get<std::string>()) : std::nullopt;
      if (!id) return error(res, 400, "\"ids\" must hold event ids (UUIDs)");
      ids.push_back(*id);
    }
    what = std::to_string(ids.size()) + " id(s)";
  } else if (body.contains("filter") && body["filter"].is_object() && body.contains("expect") &&
             body["expect"].is_number_unsigned()) {
    what = "by filter " + body["filter"].dump(-1, ' ', false, json::error_handler_t::replace);
    Filter f{body["filter"].value("type", ""), body["filter"].value("key", ""),
             body["filter"].value("error", "")};
    auto found = matching(*p->store, f, kMaxDead);
    auto expect = body["expect"].get<std::size_t>();
    if (found.size() != expect)
      return reply(res, 409,
                   json{{"error", "the filter now matches " + std::to_string(found.size()) +
                                      " dead letters, not the " + std::to_string(expect) +
                                      " confirmed; preview again"},
                        {"matching", found.size()}});
    for (const auto& e : found) ids.push_back(e.id);
  } else {
    return error(res, 400, "give \"ids\", or \"filter\" with \"expect\" (the previewed count)");
  }
  try {
    std::size_t n = retry ? p->store->retry(ids) : p->store->discard(ids);
    audit(req, p->name,
          std::string(retry ? "retry " : "discard ") + what + ": " +
              (retry ? "retried " : "discarded ") + std::to_string(n));
    reply(res, 200, json{{retry ? "retried" : "discarded", n}});
  } catch (const std::exception& e) {
    audit(req, p->name, std::string(retry ? "retry " : "discard ") + what + " failed: " + e.what());
    error(res, 502, e.what());
  }
}

// POST /api/consumer/dead/{retry,discard} {"pipeline":P,"ids":[row or event ids]}: the same
// guard as the store's dead letters; the consumer of the group handles retried ones again.
void consumer_mutate(PipelineSource& source, const httplib::Request& req, httplib::Response& res,
                     bool retry) {
  std::string why;
  if (int status = refuse_mutation(req, source.admin_token(), why)) return error(res, status, why);
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("pipeline") || !body["pipeline"].is_string() ||
      !body.contains("ids") || !body["ids"].is_array())
    return error(res, 400, "body must be {\"pipeline\":P,\"ids\":[...]}");
  auto views = source.pipelines();
  const PipelineView* p = find(views, body["pipeline"].get<std::string>());
  if (!p || !p->consumer) return error(res, 404, "no such consume pipeline");
  std::vector<std::string> ids;
  for (const auto& v : body["ids"]) {
    if (v.is_string())
      ids.push_back(v.get<std::string>());
    else if (v.is_number_integer())
      ids.push_back(std::to_string(v.get<std::int64_t>()));
    else
      return error(res, 400, "\"ids\" must hold dead-letter row ids or event ids");
  }
  const std::string what = std::string("consumer dead letters: ") +
                           (retry ? "retry " : "discard ") + std::to_string(ids.size()) + " id(s)";
  try {
    std::size_t n = retry ? p->consumer->retry(ids) : p->consumer->discard(ids);
    audit(req, p->name, what + ": " + (retry ? "retried " : "discarded ") + std::to_string(n));
    reply(res, 200, json{{retry ? "retried" : "discarded", n}});
  } catch (const std::exception& e) {
    audit(req, p->name, what + " failed: " + e.what());
    error(res, 502, e.what());
  }
}

}  // namespace

bool refuse_before_body(const httplib::Request& req, httplib::Response& res, PipelineSource& source,
                        std::string& why) {
  if (req.method != "POST" || req.path.rfind("/api/", 0) != 0) return false;
  int status = refuse_mutation(req, source.admin_token(), why);
  if (status == 0) return false;
  error(res, status, why);
  return true;
}

void add_dashboard_routes(httplib::Server& server, PipelineSource& source) {
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src data:; frame-ancestors 'none'");
    res.set_header("X-Frame-Options", "DENY");
    res.set_content(std::string(kDashboardHtml), "text/html; charset=utf-8");
  });
  server.Get("/api/overview", [&source](const httplib::Request&, httplib::Response& res) {
    json pipelines = json::array();
    for (const auto& p : source.pipelines()) {
      json j{{"name", p.name},
             {"store", p.store ? std::string(p.store->backend()) : ""},
             {"sink", p.sink},
             {"running", p.running},
             {"failure", redact(p.failure)}};
      if (!p.started) j["started"] = false;  // failed to start on a reload: `failure` says why
      if (auto why = sink_down_reason(p); !why.empty()) j["sink_error"] = redact(why);
      if (p.relay) {
        auto c = p.relay->counters();
        j["delivered"] = c.delivered;
        j["failed"] = c.failed;
        j["dead_total"] = c.dead;
        j["lease_lost"] = c.lease_lost;
        j["lease_ms"] = p.relay->options().lease.count();
        j["ordered"] = p.relay->options().order == ClaimOrder::ordered;
      }
      if (p.consumer) j["consumer"] = consumer_json(p.consumer->status());
      if (p.store) {
        try {
          auto s = p.store->stats();
          j["pending"] = s.pending;
          j["leased"] = s.leased;
          j["dead"] = s.dead;
          j["oldest_pending_age_s"] = double(s.oldest_pending_age.count()) / 1000.0;
        } catch (const std::exception& e) {
          j["store_error"] = redact(e.what());
        }
      }
      pipelines.push_back(std::move(j));
    }
    reply(res, 200,
          json{{"pipelines", pipelines},
               {"read_only", source.admin_token().empty()},
               {"shutting_down", source.shutting_down()}});
  });
  server.Get("/api/dead", [&source](const httplib::Request& req, httplib::Response& res) {
    auto views = source.pipelines();
    const PipelineView* p = find(views, req.get_param_value("pipeline"));
    if (!p || !p->store) return error(res, 404, "no such pipeline");
    Filter f{req.get_param_value("type"), req.get_param_value("key"), req.get_param_value("error")};
    std::size_t limit = 100;
    if (req.has_param("limit")) {
      try {
        limit = std::clamp<std::size_t>(std::stoul(req.get_param_value("limit")), 1, kMaxDead);
      } catch (const std::exception&) {
        return error(res, 400, "limit must be a number");
      }
    }
    try {
      auto all = matching(*p->store, f, kMaxDead);
      json events = json::array();
      for (std::size_t i = 0; i < all.size() && i < limit; ++i) events.push_back(dead_json(all[i]));
      reply(res, 200, json{{"matching", all.size()}, {"events", events}});
    } catch (const std::exception& e) {
      error(res, 502, e.what());
    }
  });
  server.Get("/api/blocked", [&source](const httplib::Request& req, httplib::Response& res) {
    auto views = source.pipelines();
    const PipelineView* p = find(views, req.get_param_value("pipeline"));
    if (!p || !p->store) return error(res, 404, "no such pipeline");
    std::size_t limit = 0;
    if (!inspect_limit(req, res, limit)) return;
    try {
      TimePoint at = now();
      json keys = json::array();
      for (const auto& e : p->store->blocked(limit)) keys.push_back(event_state_json(e, at));
      bool ordered = !p->relay || p->relay->options().order == ClaimOrder::ordered;
      reply(res, 200, json{{"ordered", ordered}, {"keys", keys}});
    } catch (const std::exception& e) {
      error(res, 502, e.what());
    }
  });
  server.Get("/api/leases", [&source](const httplib::Request& req, httplib::Response& res) {
    auto views = source.pipelines();
    const PipelineView* p = find(views, req.get_param_value("pipeline"));
    if (!p || !p->store) return error(res, 404, "no such pipeline");
    std::size_t limit = 0;
    if (!inspect_limit(req, res, limit)) return;
    try {
      TimePoint at = now();
      auto leased = p->store->leased(kMaxInspect);
      Duration lease = p->relay ? p->relay->options().lease : Duration(0);
      json events = json::array();
      for (std::size_t i = 0; i < leased.size() && i < limit; ++i)
        events.push_back(event_state_json(leased[i], at));
      reply(res, 200,
            json{{"lease_ms", lease.count()},
                 {"holders", holders_json(leased, at, lease)},
                 {"events", events},
                 {"leased", leased.size()}});
    } catch (const std::exception& e) {
      error(res, 502, e.what());
    }
  });
  server.Get("/api/consumer/dead", [&source](const httplib::Request& req, httplib::Response& res) {
    auto views = source.pipelines();
    const PipelineView* p = find(views, req.get_param_value("pipeline"));
    if (!p || !p->consumer) return error(res, 404, "no such consume pipeline");
    std::size_t limit = 0;
    if (!inspect_limit(req, res, limit)) return;
    try {
      json events = json::array();
      for (const auto& d : p->consumer->dead(limit))
        events.push_back(json{{"id", d.id},
                              {"event_id", d.event_id},
                              {"key", d.key},
                              {"position", d.position},
                              {"attempts", d.attempts},
                              {"error", redact(d.error)},
                              {"state", d.state},
                              {"dead_at", format_rfc3339(d.dead_at)},
                              {"payload", d.payload}});
      reply(res, 200, json{{"events", events}});
    } catch (const std::exception& e) {
      error(res, 502, e.what());
    }
  });
  server.Post("/api/consumer/dead/retry",
              [&source](const httplib::Request& req, httplib::Response& res) {
                consumer_mutate(source, req, res, true);
              });
  server.Post("/api/consumer/dead/discard",
              [&source](const httplib::Request& req, httplib::Response& res) {
                consumer_mutate(source, req, res, false);
              });
  server.Post("/api/dead/retry", [&source](const httplib::Request& req, httplib::Response& res) {
    mutate(source, req, res, true);
  });
  server.Post("/api/dead/discard", [&source](const httplib::Request& req, httplib::Response& res) {
    mutate(source, req, res, false);
  });
}

}  // namespace outpost::cli
