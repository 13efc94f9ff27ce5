// outpost emit: write events into a store's outbox.
//   outpost emit --store URL --type T [--key K] [--header k=v]... --payload JSON
//   outpost emit ... [--delay DURATION | --at RFC3339]   scheduled delivery (Event::deliver_at;
//                                  with -, for the lines that give no deliver_at)
//   outpost emit --store URL -     one event per stdin line (JSON encoding), ONE transaction:
//                                  a bad line is a usage error naming its number, nothing written
//                                  (nor opened); unknown fields are bad (docs/cli.md, emit).
// A W3C traceparent/tracestate header is checked here (outpost/event.h, trace_context_problem)
// and travels to every sink under its own name (docs/sinks.md, "Trace context").
// Prints the id of every event written, one per line.

#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "core/append_check.h"
#include "core/duration.h"
#include "core/url.h"
#include "in_process_store.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/json.h"
#include "pipeline_limits.h"

namespace outpost::cli {
namespace {

struct EmitArgs {
  std::string store;
  std::string type;
  std::string key;
  std::vector<std::string> headers;
  std::string payload;
  std::string delay;   // --delay DURATION: deliver_at = now + it
  std::string at;      // --at RFC3339: deliver_at = it
  std::string source;  // "-" reads stdin
};

// --delay / --at as a deliver_at (docs/relay.md, "Scheduled delivery"); nullopt when neither.
// Usage errors (exit 2) name the flag, before anything is opened.
std::optional<TimePoint> deliver_at_of(const EmitArgs& a, const CLI::App& sub) {
  const bool delay = sub.count("--delay") > 0, at = sub.count("--at") > 0;
  if (delay && at) throw ConfigError("emit: give --delay or --at, not both");
  if (delay) return now() + core::parse_duration(a.delay, "emit: --delay");
  if (at) {
    auto t = parse_rfc3339(a.at);
    if (!t)
      throw ConfigError("emit: --at must be an RFC 3339 time like 2026-11-27T09:00:00Z, got '" +
                        a.at + "'");
    return *t;
  }
  return std::nullopt;
}

bool blank(const std::string& s) {
  return s.find_first_not_of(" \t\r") == std::string::npos;
}

// The payload limit the store will apply (StoreOptions::max_payload_bytes; a SQLite URL may set
// it with max_payload_bytes=N), so that an oversize payload is refused naming its line before
// the store is opened or created (docs/cli.md, "Input rules").
std::size_t payload_limit_of(const std::string& store_url) {
  auto limit = StoreOptions{}.max_payload_bytes;
  try {
    if (auto n = core::Url::parse(store_url).int_param("max_payload_bytes", 0, INT32_MAX))
      limit = static_cast<std::size_t>(*n);
  } catch (const ConfigError&) {
    // A form only its store reads (checked by check_store_url already): the store's default.
  }
  return limit;
}

// The events read from stdin and the line each came from (for messages).
struct StdinEvents {
  std::vector<Event> events;
  std::vector<std::size_t> lines;  // lines[i]: stdin line of events[i]
};

StdinEvents read_stdin_events(std::size_t max_payload_bytes) {
  StdinEvents in;
  auto& events = in.events;
  std::map<EventId, std::size_t> given_ids;  // id given on input -> its line
  std::string line;
  std::size_t number = 0;
  while (std::getline(std::cin, line)) {
    ++number;
    if (blank(line)) continue;  // trailing newlines and spacing lines carry no event
    auto where = [number] { return "stdin line " + std::to_string(number); };
    try {
      events.push_back(event_from_json(line, JsonInput::strict));
    } catch (const ConfigError& e) {
      throw ConfigError(where() + ": " + e.what());
    }
    // The stores' own input rules (core/append_check.h), here so that the message names the
    // line and nothing is opened; the payload limit is the store's (payload_limit_of).
    core::check_event(events.back(), where, max_payload_bytes, "cli");
    if (auto e = limits::control_error(events.back().type); !e.empty())
      throw ConfigError(where() + ": field 'type' " + e);
    // A trace context tracing libraries would drop is refused (outpost/event.h).
    if (auto p = trace_context_problem(events.back().headers); !p.empty())
      throw ConfigError(where() + ": " + p);
    // Two lines with one id can never both be written (every store refuses the call): an input
    // error naming both lines, found before anything is opened.
    if (const EventId& id = events.back().id; !id.is_nil()) {
      auto [it, fresh] = given_ids.emplace(id, number);
      if (!fresh)
        throw ConfigError(where() + ": duplicate event id " + id.str() + " (also on stdin line " +
                          std::to_string(it->second) + "); nothing was written");
    }
    in.lines.push_back(number);
  }
  if (std::cin.bad()) throw Error(ErrorCode::internal, "cli", "reading stdin failed");
  return in;
}

// An id the store already holds (ErrorCode::conflict, the id in its message) named by its stdin
// line, as every other per-line error is; the store's words and error code are kept.
[[noreturn]] void rethrow_naming_the_line(const Error& e, const StdinEvents& in) {
  std::string message = e.what();
  for (std::size_t i = 0; i < in.events.size(); ++i) {
    if (message.find(in.events[i].id.str()) == std::string::npos) continue;
    throw Error(e.code(), e.backend(), "stdin line " + std::to_string(in.lines[i]) + ": " + message,
                e.native_code());
  }
  throw;
}

int run_emit(const EmitArgs& a, const CLI::App& sub) {
  check_store_url(a.store);  // usage errors before anything is opened
  if (auto what = in_process_store(a.store); !what.empty())
    throw ConfigError("emit: --store: " + what +
                      " lives inside this process: the events would be gone when emit exits; "
                      "use sqlite:PATH, postgresql:// or redis://");
  StdinEvents input;  // lines stay empty for the flags' one event
  std::vector<Event>& events = input.events;
  const std::optional<TimePoint> deliver_at = deliver_at_of(a, sub);
  if (!a.source.empty()) {
    if (a.source != "-")
      throw ConfigError("emit: unexpected argument '" + a.source + "' (use - to read stdin)");
    for (const char* flag : {"--type", "--key", "--header", "--payload"})
      if (sub.count(flag) > 0)
        throw ConfigError(std::string("emit: ") + flag +
                          " cannot be combined with - (stdin lines carry their own fields)");
    input = read_stdin_events(payload_limit_of(a.store));
  } else {
    if (sub.count("--type") == 0) throw ConfigError("emit: --type is required (or use -)");
    if (a.type.empty()) throw ConfigError("emit: --type must not be empty");
    if (auto e = limits::control_error(a.type); !e.empty())
      throw ConfigError("emit: --type " + e);  // one rule with consumer group names
    if (sub.count("--payload") == 0) throw ConfigError("emit: --payload is required (or use -)");
    Event e = Event::make(a.type, a.payload, a.key);
    for (const auto& h : a.headers) {
      auto eq = h.find('=');
      if (eq == std::string::npos || eq == 0)
        throw ConfigError("emit: --header '" + h + "' must be NAME=VALUE");
      e.headers[h.substr(0, eq)] = h.substr(eq + 1);
    }
    // The payload's kind (outpost/event.h): the bytes must be what --header content_type says,
    // or without one JSON or UTF-8 text; one rule with the bytes of `emit -` (json.h).
    check_payload_kind(e, "emit: --payload");
    core::check_event(
        e, [] { return std::string("emit"); }, payload_limit_of(a.store), "cli");
    check_trace_context(e, "emit");
    events.push_back(std::move(e));
  }
  // Ids are assigned here, not by the store, so they can be printed.
  for (auto& e : events) {
    if (e.id.is_nil()) e.id = EventId::generate();
    if (deliver_at && !e.deliver_at) e.deliver_at = deliver_at;
  }

  auto store = open_store(a.store);
  try {
    if (!events.empty()) store->append(events);  // TxHandle{}: one transaction, all or nothing
  } catch (const Error& e) {
    if (e.code() != ErrorCode::conflict || input.lines.empty()) throw;
    rethrow_naming_the_line(e, input);
  }
  std::string out;
  out.reserve(events.size() * 37);
  for (const auto& e : events) out += e.id.str() + "\n";
  std::cout << out << std::flush;
  return kExitOk;
}

}  // namespace

Runner add_emit_command(CLI::App& root) {
  auto args = std::make_shared<EmitArgs>();
  CLI::App* sub = root.add_subcommand(
      "emit",
      "Write events into the outbox.\n"
      "  outpost emit --store URL --type T [--key K] [--header k=v]... --payload JSON\n"
      "  outpost emit ... --delay 5m | --at 2026-11-27T09:00:00Z   (scheduled delivery)\n"
      "  outpost emit --store URL -   (one JSON event per stdin line, one transaction)\n"
      "Prints the id of each event written.");
  sub->add_option("--store", args->store, "Store URL (sqlite:PATH, postgresql://..., redis://...)")
      ->required()
      ->envname("OUTPOST_STORE");
  sub->add_option("--type", args->type, "Event type, e.g. order.placed");
  sub->add_option("--key", args->key, "Aggregate / partition key (order per key); empty: none");
  sub->add_option("--header", args->headers,
                  "Header NAME=VALUE (repeatable); traceparent=00-<trace id>-<span id>-<flags> "
                  "(W3C, checked) reaches every sink as the traceparent header")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--payload", args->payload,
                  "Payload: JSON, or UTF-8 text (then header content_type is text/plain); "
                  "other bytes with --header content_type=TYPE, e.g. application/octet-stream");
  sub->add_option("--delay", args->delay,
                  "Deliver no sooner than this from now: 500ms, 30s, 5m, 12h, 7d (held by the "
                  "store; in ordered mode the key's later events wait too)");
  sub->add_option("--at", args->at,
                  "Deliver no sooner than this RFC 3339 time, e.g. 2026-11-27T09:00:00Z");
  sub->add_option("source", args->source, "- to read events from stdin (JSON lines)");
  sub->footer(supported_schemes_text());
  return [args, sub] { return run_emit(*args, *sub); };
}

}  // namespace outpost::cli
