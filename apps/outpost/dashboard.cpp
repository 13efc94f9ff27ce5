#include "dashboard.h"

#include <httplib.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "dashboard_guard.h"
#include "dashboard_html.h"  // kDashboardHtml, generated from dashboard.html at build time
#include "dead_letters.h"
#include "event_state_json.h"
#include "health.h"
#include "http_server.h"
#include "log.h"
#include "outpost/error.h"
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

// A pipeline that has dead letters: a relay's store, or a consume pipeline's group.
bool has_dead_letters(const PipelineView* p) {
  return p && (p->store || p->consumer);
}

// One pipeline's dead letters matching a filter, in the one shape of dead_letters.h, oldest
// first: a store's (ids: event ids) or a consumer group's (ids: row ids, unique where an event id
// may be parked twice). At most kMaxDead are read; `complete` false when there were more.
struct DeadLetters {
  std::vector<std::string> ids;
  std::vector<std::string> lines;
  bool complete = true;
};

DeadLetters matching(const PipelineView& p, DeadLetterFilter f) {
  DeadLetters out;
  f.start_clock();
  if (p.consumer) {
    auto rows = p.consumer->dead(kMaxDead);
    out.complete = rows.size() < kMaxDead;
    for (const auto& d : rows) {
      auto decoded = decode_dead_letter(d);
      if (!decoded.matches(f)) continue;
      out.ids.push_back(std::to_string(d.id));
      out.lines.push_back(dead_letter_json(decoded));
    }
  } else {
    auto dead = p.store->dead(kMaxDead);
    out.complete = dead.size() < kMaxDead;
    for (const auto& e : dead) {
      if (!f.matches(e)) continue;
      out.ids.push_back(e.id.str());
      out.lines.push_back(dead_letter_json(e));
    }
  }
  return out;
}

// The filter of a GET's query or a POST's "filter" object: type, key, error, older_than.
// False with a 400 reply when older_than is malformed.
template <typename Get>
bool parse_filter(httplib::Response& res, Get get, DeadLetterFilter& f) {
  DeadLetterFilterArgs args;
  for (auto [field, slot] :
       {std::pair{"type", &args.type}, std::pair{"key", &args.key}, std::pair{"error", &args.error},
        std::pair{"older_than", &args.older_than}})
    if (auto v = get(field); v && !v->empty()) *slot = *v;
  try {
    f = DeadLetterFilter::from(args, "older_than");
    return true;
  } catch (const std::exception& e) {
    error(res, 400, e.what());
    return false;
  }
}

// A whole number from the query (`fallback` when absent) within [low, high], under the rule of
// the CLI's --limit (dead_letters.h, whole_number_error); false with a 400 naming the parameter
// and its range otherwise: never clamped, so a page is what was asked for or an error.
bool number_param(const httplib::Request& req, httplib::Response& res, const char* name,
                  std::size_t fallback, std::size_t low, std::size_t high, std::size_t& out) {
  out = fallback;
  if (!req.has_param(name)) return true;
  if (auto why = whole_number_error(req.get_param_value(name), low, high, out); !why.empty()) {
    error(res, 400, std::string(name) + " " + why);
    return false;
  }
  return true;
}

// A name the request gives that the route does not know: a misspelt filter must not widen to
// every dead letter (docs/dashboard.md). 400 naming it, and false.
template <typename Names>
bool known(httplib::Response& res, const Names& names, std::initializer_list<std::string> allowed,
           const char* what) {
  for (const auto& n : names)
    if (std::find(allowed.begin(), allowed.end(), n) == allowed.end()) {
      error(res, 400, std::string("unknown ") + what + " '" + n + "'");
      return false;
    }
  return true;
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

// ?limit= within [1, kMaxInspect] (default 100); false with a 400 reply otherwise.
bool inspect_limit(const httplib::Request& req, httplib::Response& res, std::size_t& limit) {
  return number_param(req, res, "limit", 100, 1, kMaxInspect, limit);
}

// GET /api/blocked and /api/leases: the relay pipeline named by ?pipeline= (404 when there is
// none) and ?limit= (400 when not in range), then `answer(pipeline, limit)`; a store error is a 502
// with its message.
template <class Answer>
void inspect(PipelineSource& source, const httplib::Request& req, httplib::Response& res,
             Answer answer) {
  auto views = source.pipelines();
  const PipelineView* p = find(views, req.get_param_value("pipeline"));
  if (!p || !p->store) return error(res, 404, "no such pipeline");
  std::size_t limit = 0;
  if (!inspect_limit(req, res, limit)) return;
  try {
    answer(*p, limit);
  } catch (const std::exception& e) {
    error(res, 502, e.what());
  }
}

// Every mutation is logged with its pipeline, what it asked (ids or filter), its outcome and
// who asked (docs/dashboard.md, "Access").
void audit(const httplib::Request& req, const std::string& pipeline, const std::string& what) {
  log("dashboard: " + what + " (from " + req.remote_addr + ")", pipeline);
}

// The start of every mutation: the caller may change things (refuse_mutation), and the body is a
// JSON object naming a pipeline. Nullopt, having replied, when not.
struct Mutation {
  json body;
  std::string pipeline;
  std::vector<PipelineView> views;  // what `pipeline` is looked up in
};
std::optional<Mutation> start_mutation(PipelineSource& source, const httplib::Request& req,
                                       httplib::Response& res) {
  if (auto r = refuse_mutation(req, source.admin_token()); r.status) {
    refuse(res, r);
    return std::nullopt;
  }
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("pipeline") || !body["pipeline"].is_string()) {
    error(res, 400, "body must be a JSON object with \"pipeline\"");
    return std::nullopt;
  }
  std::string pipeline = body["pipeline"].get<std::string>();
  return Mutation{std::move(body), std::move(pipeline), source.pipelines()};
}

// POST /api/dead/{retry,discard} and /api/consumer/dead/{retry,discard}: {"pipeline":P} and
// either "ids" (a store's: event ids; a group's: row ids or event ids) or "filter" with "expect",
// acted on only if the filter still matches exactly that many (the count the operator confirmed).
// Either route takes either kind of pipeline.
void mutate(PipelineSource& source, const httplib::Request& req, httplib::Response& res,
            bool retry) {
  auto m = start_mutation(source, req, res);
  if (!m) return;
  const json& body = m->body;
  std::vector<std::string> keys, filter_keys;
  for (const auto& [k, v] : body.items()) keys.push_back(k);
  if (body.contains("filter") && body["filter"].is_object())
    for (const auto& [k, v] : body["filter"].items()) filter_keys.push_back(k);
  if (!known(res, keys, {"pipeline", "ids", "filter", "expect"}, "key") ||
      !known(res, filter_keys, {"type", "key", "error", "older_than"}, "filter key"))
    return;
  const PipelineView* p = find(m->views, m->pipeline);
  if (!has_dead_letters(p)) return error(res, 404, "no such pipeline: '" + m->pipeline + "'");
  const bool group = p->consumer != nullptr;
  std::vector<std::string> ids;
  std::string what;  // for the log: "3 id(s)" or "by filter {...}"
  if (body.contains("ids")) {
    if (!body["ids"].is_array()) return error(res, 400, "\"ids\" must be an array");
    for (const auto& v : body["ids"]) {
      std::string id = v.is_string()                     ? v.get<std::string>()
                       : v.is_number_unsigned() && group ? std::to_string(v.get<std::uint64_t>())
                                                         : std::string();
      bool row = group && !id.empty() && id.find_first_not_of("0123456789") == std::string::npos;
      if (!row && !EventId::parse(id))
        return error(res, 400,
                     group ? "\"ids\" must hold dead-letter row ids or event ids (UUIDs)"
                           : "\"ids\" must hold event ids (UUIDs)");
      ids.push_back(id);
    }
    what = std::to_string(ids.size()) + " id(s)";
  } else if (body.contains("filter") && body["filter"].is_object() && body.contains("expect") &&
             body["expect"].is_number_unsigned()) {
    const json& fj = body["filter"];
    what = "by filter " + fj.dump(-1, ' ', false, json::error_handler_t::replace);
    DeadLetterFilter f;
    auto field = [&](const char* name) -> std::optional<std::string> {
      if (fj.contains(name) && fj[name].is_string()) return fj[name].get<std::string>();
      return std::nullopt;
    };
    if (!parse_filter(res, field, f)) return;
    DeadLetters found;
    try {
      found = matching(*p, f);
    } catch (const std::exception& e) {
      return error(res, 502, e.what());
    }
    auto expect = body["expect"].get<std::size_t>();
    if (found.ids.size() != expect)
      return reply(res, 409,
                   json{{"error", "the filter now matches " + std::to_string(found.ids.size()) +
                                      " dead letters, not the " + std::to_string(expect) +
                                      " confirmed; preview again"},
                        {"matching", found.ids.size()}});
    ids = std::move(found.ids);
  } else {
    return error(res, 400, "give \"ids\", or \"filter\" with \"expect\" (the previewed count)");
  }
  if (group)
    what = "consumer dead letters: " + std::string(retry ? "retry " : "discard ") + what;
  else
    what = std::string(retry ? "retry " : "discard ") + what;
  try {
    std::size_t n = 0;
    if (group) {
      n = retry ? p->consumer->retry(ids) : p->consumer->discard(ids);
    } else {
      std::vector<EventId> events;
      for (const auto& id : ids) events.push_back(*EventId::parse(id));
      n = retry ? p->store->retry(events) : p->store->discard(events);
    }
    audit(req, p->name, what + ": " + (retry ? "retried " : "discarded ") + std::to_string(n));
    reply(res, 200, json{{retry ? "retried" : "discarded", n}});
  } catch (const std::exception& e) {
    audit(req, p->name, what + " failed: " + e.what());
    error(res, 502, e.what());
  }
}

// POST /api/consumer/seek {"pipeline":P,"to":T,"reprocess":bool} and /api/consumer/delete
// {"pipeline":P,"group":G}: G is the group's name typed again, the operator's confirmation. A
// running consumer notices a seek (docs/consumers.md, "Moving and deleting a group"); it would
// stop with an error at a delete, so a delete waits until the pipeline is not running.
void group_operation(PipelineSource& source, const httplib::Request& req, httplib::Response& res,
                     bool seek) {
  auto m = start_mutation(source, req, res);
  if (!m) return;
  const json& body = m->body;
  const PipelineView* p = find(m->views, m->pipeline);
  if (!p || !p->consumer) return error(res, 404, "no such consume pipeline: '" + m->pipeline + "'");
  const std::string group = p->consumer->status().group;
  auto shown = [](const std::string& position) {
    return position.empty() ? std::string("the beginning") : position;
  };
  std::string what = "consumer group '" + group + "': ";
  try {
    if (seek) {
      if (!body.contains("to") || !body["to"].is_string() ||
          (body.contains("reprocess") && !body["reprocess"].is_boolean()))
        return error(res, 400,
                     "give \"to\": beginning, end, a position of the log or an RFC 3339 time, "
                     "and optionally \"reprocess\": true or false");
      const std::string to = body["to"].get<std::string>();
      const bool reprocess = body.value("reprocess", false);
      what += "seek to " + to + (reprocess ? " with reprocess" : "");
      auto m = p->consumer->seek(to, reprocess);
      audit(req, p->name, what + ": moved from " + shown(m.from) + " to " + shown(m.to));
      return reply(res, 200,
                   json{{"group", group},
                        {"source", redact(m.source)},
                        {"from", m.from},
                        {"to", m.to},
                        {"reprocess", reprocess}});
    }
    if (!body.contains("group") || !body["group"].is_string() || body["group"] != group)
      return error(res, 400,
                   "\"group\" must repeat the group's name ('" + group +
                       "'): the confirmation that it is deleted");
    if (p->running)
      return error(res, 409,
                   "pipeline '" + p->name +
                       "' is running: its consumer would stop with an error once its group is "
                       "deleted; stop the pipeline first (remove it from the configuration and "
                       "reload)");
    what += "delete";
    auto d = p->consumer->delete_group();
    audit(req, p->name,
          what + ": deleted at " + shown(d.position) + " with " + std::to_string(d.dead) +
              " dead letters and " + std::to_string(d.inbox) + " inbox rows");
    reply(res, 200,
          json{{"group", group},
               {"source", redact(d.source)},
               {"position", d.position},
               {"dead", d.dead},
               {"inbox", d.inbox}});
  } catch (const ConfigError& e) {
    audit(req, p->name, what + " refused: " + e.what());
    error(res, 400, e.what());
  } catch (const Error& e) {
    audit(req, p->name, what + " failed: " + e.what());
    error(res, e.code() == ErrorCode::not_found ? 404 : 502, e.what());
  } catch (const std::exception& e) {
    audit(req, p->name, what + " failed: " + e.what());
    error(res, 502, e.what());
  }
}

// GET /api/dead and /api/consumer/dead: ?pipeline=P&type=&key=&error=&older_than=&offset=&limit=
// -> {"matching":N,"offset":O,"limit":L,"complete":bool,"events":[...]}: the matches from
// `offset` on, at most `limit` (100 by default), oldest first; `matching` counts them all among
// the oldest kMaxDead read (`complete` false when there were more).
void list_dead(PipelineSource& source, const httplib::Request& req, httplib::Response& res) {
  std::vector<std::string> names;
  for (const auto& [k, v] : req.params) names.push_back(k);
  if (!known(res, names, {"pipeline", "type", "key", "error", "older_than", "offset", "limit"},
             "parameter"))
    return;
  auto views = source.pipelines();
  const PipelineView* p = find(views, req.get_param_value("pipeline"));
  if (!has_dead_letters(p))
    return error(res, 404, "no such pipeline: '" + req.get_param_value("pipeline") + "'");
  DeadLetterFilter f;
  auto param = [&](const char* name) -> std::optional<std::string> {
    if (req.has_param(name)) return req.get_param_value(name);
    return std::nullopt;
  };
  if (!parse_filter(res, param, f)) return;
  std::size_t offset = 0, limit = 0;
  if (!number_param(req, res, "offset", 0, 0, kMaxDead, offset) ||
      !number_param(req, res, "limit", 100, 1, kMaxDead, limit))
    return;
  try {
    DeadLetters found = matching(*p, f);
    // Composed as text: each dead letter's payload keeps its exact JSON (dead_letters.h).
    std::string events = "[";
    for (std::size_t i = offset; i < found.lines.size() && i < offset + limit; ++i)
      events += (i == offset ? "" : ",") + found.lines[i];
    events += "]";
    res.status = 200;
    res.set_header("Cache-Control", "no-store");
    res.set_content(
        "{\"matching\":" + std::to_string(found.lines.size()) +
            ",\"offset\":" + std::to_string(offset) + ",\"limit\":" + std::to_string(limit) +
            ",\"complete\":" + (found.complete ? "true" : "false") + ",\"events\":" + events + "}",
        "application/json");
  } catch (const std::exception& e) {
    error(res, 502, e.what());
  }
}

// The mutation guard of dashboard.h for a POST to /api/..., before its body is read.
bool refuse_before_body(const httplib::Request& req, httplib::Response& res, PipelineSource& source,
                        std::string& why) {
  if (req.method != "POST" || req.path.rfind("/api/", 0) != 0) return false;
  auto r = refuse_mutation(req, source.admin_token());
  if (r.status == 0) return false;
  why = r.why;
  refuse(res, r);
  return true;
}

}  // namespace

void add_dashboard_routes(HttpServer& server, PipelineSource& source) {
  server.guard("dashboard",
               [&source](const httplib::Request& req, httplib::Response& res, std::string& why) {
                 return refuse_before_body(req, res, source, why);
               });
  server.get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src data:; frame-ancestors 'none'");
    res.set_header("X-Frame-Options", "DENY");
    res.set_content(std::string(kDashboardHtml), "text/html; charset=utf-8");
  });
  server.get("/api/overview", [&source](const httplib::Request&, httplib::Response& res) {
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
        j["ordered"] = p.relay->options().order != ClaimOrder::unordered;
      }
      if (p.consumer) j["consumer"] = consumer_json(p.consumer->status());
      if (p.store) {
        try {
          auto s = p.store->stats();
          j["pending"] = s.pending;
          j["scheduled"] = s.scheduled;
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
  server.get("/api/dead", [&source](const httplib::Request& req, httplib::Response& res) {
    list_dead(source, req, res);
  });
  server.get("/api/blocked", [&source](const httplib::Request& req, httplib::Response& res) {
    inspect(source, req, res, [&res](const PipelineView& p, std::size_t limit) {
      TimePoint at = now();
      json keys = json::array();
      for (const auto& e : p.store->blocked(limit)) keys.push_back(event_state_json(e, at));
      bool ordered = !p.relay || p.relay->options().order != ClaimOrder::unordered;
      reply(res, 200, json{{"ordered", ordered}, {"keys", keys}});
    });
  });
  server.get("/api/leases", [&source](const httplib::Request& req, httplib::Response& res) {
    inspect(source, req, res, [&res](const PipelineView& p, std::size_t limit) {
      TimePoint at = now();
      auto leased = p.store->leased(kMaxInspect);
      Duration lease = p.relay ? p.relay->options().lease : Duration(0);
      json events = json::array();
      for (std::size_t i = 0; i < leased.size() && i < limit; ++i)
        events.push_back(event_state_json(leased[i], at));
      reply(res, 200,
            json{{"lease_ms", lease.count()},
                 {"holders", holders_json(leased, at, lease)},
                 {"events", events},
                 {"leased", leased.size()}});
    });
  });
  server.get("/api/consumer/dead", [&source](const httplib::Request& req, httplib::Response& res) {
    list_dead(source, req, res);
  });
  server.post("/api/consumer/dead/retry",
              [&source](const httplib::Request& req, httplib::Response& res) {
                mutate(source, req, res, true);
              });
  server.post("/api/consumer/dead/discard",
              [&source](const httplib::Request& req, httplib::Response& res) {
                mutate(source, req, res, false);
              });
  server.post("/api/consumer/seek", [&source](const httplib::Request& req, httplib::Response& res) {
    group_operation(source, req, res, true);
  });
  server.post("/api/consumer/delete",
              [&source](const httplib::Request& req, httplib::Response& res) {
                group_operation(source, req, res, false);
              });
  server.post("/api/dead/retry", [&source](const httplib::Request& req, httplib::Response& res) {
    mutate(source, req, res, true);
  });
  server.post("/api/dead/discard", [&source](const httplib::Request& req, httplib::Response& res) {
    mutate(source, req, res, false);
  });
}

}  // namespace outpost::cli
