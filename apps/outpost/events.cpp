// outpost events: inspect and operate on the outbox (docs/cli.md, "events").
//   outpost events --store URL stats [--json]
//   outpost events --store URL list [--limit N] [FILTERS] [--newest-first]   undelivered
//   outpost events --store URL dead [--limit N] [FILTERS] [--newest-first]   dead letters
//   outpost events --store URL blocked [--limit N]     failing key heads, JSON lines
//   outpost events --store URL leased [--limit N]      events under a live lease, JSON lines
//   outpost events --store URL show ID                 one event in any state, JSON
//   outpost events --store URL archive [--limit N]     archived events, newest first, JSON
//   outpost events --store URL retry ID...|--all|FILTERS [--verbose]    dead -> pending
//   outpost events --store URL discard ID...|--all|FILTERS [--verbose]  dead -> deleted
// FILTERS: --type T (exact) --key K (substring) --error TEXT (substring of the last error)
// --older-than DURATION, the dashboard's dead-letter filters plus age.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli.h"
#include "dead_letters.h"
#include "event_state_json.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/json.h"

namespace outpost::cli {
namespace {

// The Store API reads dead letters and undelivered events oldest first up to a bound and cannot
// page: filtering, --newest-first, id checks and `show` read at most this many of each (and say
// so on stderr when there are more). docs/cli.md, "events".
constexpr std::size_t kMaxScan = 100'000;

using FilterArgs = DeadLetterFilterArgs;

// The dead-letter filter (dead_letters.h) also selects undelivered events for `list`: no last
// error, age from occurred_at.
struct Filter : DeadLetterFilter {
  using DeadLetterFilter::matches;
  bool matches(const StoredEvent& e) const {
    return matches(e.type, e.key, nullptr, e.occurred_at);
  }
};

Filter make_filter(const FilterArgs& a) {
  return Filter{DeadLetterFilter::from(a)};
}

void warn_bound(const char* command, const char* what) {
  std::cerr << "outpost: warning: " << command << ": the store holds more than " << kMaxScan << " "
            << what << "; only the oldest " << kMaxScan << " were read\n";
}

struct EventsArgs {
  std::string store;
  bool json = false;
  std::size_t list_limit = 100;
  std::size_t dead_limit = 100;
  std::size_t inspect_limit = 100;
  std::size_t archive_limit = 100;
  FilterArgs filter;
  bool newest_first = false;
  bool verbose = false;
  std::string show_id;
  std::vector<std::string> retry_ids;
  bool retry_all = false;
  std::vector<std::string> discard_ids;
  bool discard_all = false;
};

std::vector<EventId> parse_ids(const std::vector<std::string>& texts, const char* command) {
  std::vector<EventId> ids;
  std::set<EventId> seen;
  for (const auto& t : texts) {
    auto id = EventId::parse(t);
    if (!id) throw ConfigError(std::string(command) + ": '" + t + "' is not an event id (UUID)");
    if (seen.insert(*id).second) ids.push_back(*id);
  }
  return ids;
}

int run_stats(Store& store, bool json) {
  StoreStats s = store.stats();
  if (json) {
    nlohmann::json j{
        {"pending", s.pending},   {"scheduled", s.scheduled},
        {"leased", s.leased},     {"dead", s.dead},
        {"archived", s.archived}, {"oldest_pending_age_ms", s.oldest_pending_age.count()}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "pending                " << s.pending << "\n"
              << "scheduled              " << s.scheduled << "\n"
              << "leased                 " << s.leased << "\n"
              << "dead                   " << s.dead << "\n"
              << "archived               " << s.archived << "\n"
              << "oldest_pending_age_ms  " << s.oldest_pending_age.count() << "\n";
  }
  return kExitOk;
}

// Reads up to kMaxScan dead letters (warning when there are more) and keeps those matching.
std::vector<DeadEvent> matching_dead(Store& store, Filter f, const char* command) {
  f.start_clock();
  auto all = store.dead(kMaxScan);
  if (all.size() >= kMaxScan) warn_bound(command, "dead letters");
  std::erase_if(all, [&](const DeadEvent& e) { return !f.matches(e); });
  return all;
}

// One line of `list` (the event) or of `dead` (the dead-letter shape, dead_letters.h).
std::string line_of(const StoredEvent& e) {
  return to_json(e);
}
std::string line_of(const DeadEvent& e) {
  return dead_letter_json(e);
}

// dead and list: without a filter or --newest-first, the store's own bound is the limit; else
// read up to kMaxScan, filter, order, and print the first `limit`.
template <typename Event, typename Read>
int print_events(const Filter* f, bool newest_first, std::size_t limit, Read read,
                 const char* command, const char* what) {
  std::vector<Event> events;
  if (!f && !newest_first) {
    events = read(limit);
  } else {
    Filter filter = f ? *f : Filter{};
    filter.start_clock();
    events = read(kMaxScan);
    if (events.size() >= kMaxScan) warn_bound(command, what);
    std::erase_if(events, [&](const Event& e) { return !filter.matches(e); });
    if (newest_first) std::reverse(events.begin(), events.end());
    if (events.size() > limit) events.resize(limit);
  }
  std::string out;
  for (const Event& e : events) out += line_of(e) + "\n";
  std::cout << out;
  return kExitOk;
}

std::string dead_letters(std::size_t n) {
  return std::to_string(n) + (n == 1 ? " dead letter" : " dead letters");
}

// retry/discard: explicit ids, --all or filters, exactly one of them. Checked before the store
// is opened, so a usage error is exit 2 whatever the store holds.
void check_operation(const char* command, const std::vector<std::string>& texts, bool all,
                     const FilterArgs& filter, bool verbose) {
  const std::string c(command);
  int ways = int(!texts.empty()) + int(all) + int(filter.given());
  if (ways > 1)
    throw ConfigError(c +
                      ": give event IDs, --all, or filters (--type, --key, --error, "
                      "--older-than), only one of them");
  if (ways == 0)
    throw ConfigError(c +
                      ": give event IDs, --all, or filters (--type, --key, --error, "
                      "--older-than)");
  if (all && verbose)
    throw ConfigError(c +
                      ": --verbose lists the ids acted on, which --all does not learn; "
                      "use a filter such as --older-than 0s instead");
  parse_ids(texts, command);
  make_filter(filter);
}

int run_operation(Store& store, const char* command, const std::vector<std::string>& texts,
                  bool all, const FilterArgs& filter_args, bool verbose) {
  const bool retry = std::string_view(command) == "retry";
  const char* done = retry ? "retried " : "discarded ";
  if (all) {
    std::size_t n = retry ? store.retry_all() : store.discard_all();
    std::cout << done << dead_letters(n) << "\n";
    return kExitOk;
  }
  std::vector<EventId> ids;
  if (!texts.empty()) {
    // All or nothing: every id must be a dead letter, else nothing is changed.
    ids = parse_ids(texts, command);
    std::set<EventId> dead_ids;
    auto dead = store.dead(kMaxScan);
    bool complete = dead.size() < kMaxScan;
    for (const auto& d : dead) dead_ids.insert(d.id);
    std::string missing;
    for (const auto& id : ids)
      if (!dead_ids.contains(id)) missing += (missing.empty() ? "" : ", ") + id.str();
    if (!missing.empty()) {
      std::cerr << "outpost: error: " << command << ": not a dead letter: " << missing;
      if (!complete) std::cerr << " (among the oldest " << kMaxScan << " dead letters read)";
      std::cerr << "; nothing was changed\n";
      return kExitRuntime;
    }
  } else {
    for (const auto& d : matching_dead(store, make_filter(filter_args), command))
      ids.push_back(d.id);
  }
  std::size_t n = ids.empty() ? 0 : (retry ? store.retry(ids) : store.discard(ids));
  std::string out;
  if (verbose)
    for (const auto& id : ids) out += id.str() + "\n";
  out += done + dead_letters(n);
  if (n < ids.size())
    out += " (" + std::to_string(ids.size()) + " matched; the others were no longer dead letters)";
  std::cout << out << "\n";
  return kExitOk;
}

// One event in whichever state the store has it, looked up over the Store API's inspection
// calls (each read up to kMaxScan): leased (live lease), pending (undelivered; with its last
// error and next attempt when it is a failed key head, Store::blocked), dead, archived.
int run_show(Store& store, const std::string& text) {
  EventId id = *EventId::parse(text);
  TimePoint at = now();
  auto merge_state = [&](nlohmann::json& j, const EventState& s) {
    const nlohmann::json state = event_state_json(s, at);
    for (auto it = state.begin(); it != state.end(); ++it) j[it.key()] = *it;
  };
  auto list = store.list(kMaxScan);
  bool truncated = list.size() >= kMaxScan;
  for (const auto& e : list) {
    if (e.id != id) continue;
    nlohmann::json j = nlohmann::json::parse(to_json(e));
    j["state"] = "pending";
    for (const auto& s : store.leased(kMaxScan))
      if (s.id == id) {
        j["state"] = "leased";
        merge_state(j, s);
      }
    if (j["state"] == "pending")
      for (const auto& s : store.blocked(kMaxScan))
        if (s.id == id) merge_state(j, s);
    std::cout << j.dump() << "\n";
    return kExitOk;
  }
  auto dead = store.dead(kMaxScan);
  truncated = truncated || dead.size() >= kMaxScan;
  for (const auto& e : dead) {
    if (e.id != id) continue;
    nlohmann::json j = nlohmann::json::parse(to_json(e));
    j["state"] = "dead";
    j["last_error"] = redact(e.last_error);
    std::cout << j.dump() << "\n";
    return kExitOk;
  }
  // Delivered and kept in the archive (stores opened with archive=1 that can read theirs).
  bool archive = true;
  try {
    auto archived = store.archived(kMaxScan);
    truncated = truncated || archived.size() >= kMaxScan;
    for (const auto& e : archived) {
      if (e.id != id) continue;
      nlohmann::json j = nlohmann::json::parse(to_json(e));
      j["state"] = "archived";
      j["archived_at"] = format_rfc3339(e.archived_at);
      std::cout << j.dump() << "\n";
      return kExitOk;
    }
  } catch (const Error& e) {
    if (e.code() != ErrorCode::not_found) throw;
    archive = false;  // no archive kept, or none this store can read
  }
  std::cerr << "outpost: error: show: " << id.str() << " not found";
  if (truncated)
    std::cerr << " (among the oldest " << kMaxScan
              << " undelivered events and dead letters and the " << kMaxScan
              << " most recently archived)";
  else
    std::cerr << " (not pending, leased or dead" << (archive ? " nor archived" : "")
              << ": delivered, discarded or never emitted)";
  std::cerr << "\n";
  return kExitRuntime;
}

}  // namespace

Runner add_events_command(CLI::App& root) {
  auto a = std::make_shared<EventsArgs>();
  CLI::App* sub = root.add_subcommand("events", "Inspect the outbox and handle dead letters.");
  sub->add_option("--store", a->store, "Store URL")->required()->envname("OUTPOST_STORE");
  sub->require_subcommand(1, 1);
  sub->fallthrough();  // --store may also come after the operation
  sub->footer(supported_schemes_text());

  auto* stats = sub->add_subcommand("stats", "Counts: pending, leased, dead, archived, oldest age");
  stats->add_flag("--json", a->json, "One JSON object instead of a table");
  auto* list = sub->add_subcommand("list", "Undelivered events (pending and leased), JSON lines");
  add_limit_option(list, a->list_limit, "At most N events");
  add_dead_letter_filter_options(list, a->filter, false);
  list->add_flag("--newest-first", a->newest_first, "Newest first (default: oldest first)");
  auto* dead = sub->add_subcommand("dead", "Dead letters, oldest first, JSON lines + last_error");
  add_limit_option(dead, a->dead_limit, "At most N events");
  add_dead_letter_filter_options(dead, a->filter, true);
  dead->add_flag("--newest-first", a->newest_first, "Newest first (default: oldest first)");
  // The archive (stores opened with archive=1), newest first (docs/cli.md).
  auto* archive = sub->add_subcommand(
      "archive", "Archived (acked) events, most recently archived first, JSON lines + archived_at");
  add_limit_option(archive, a->archive_limit, "At most N events");
  auto* blocked = sub->add_subcommand(
      "blocked",
      "Keys whose head event failed (reason \"failing\") or comes after a dead letter of its key "
      "(reason \"dead\": held under --on-dead hold), JSON lines");
  auto* leased = sub->add_subcommand("leased", "Events under a live lease, JSON lines");
  for (auto* inspect : {blocked, leased})
    add_limit_option(inspect, a->inspect_limit, "At most N events");
  auto* show = sub->add_subcommand(
      "show",
      "One event in any state (pending, leased, dead, archived) as JSON; exit 1 if not found");
  show->add_option("id", a->show_id, "Event id")->required();
  auto* retry = sub->add_subcommand(
      "retry", "Dead letters back to pending (attempts reset): by IDs, --all or filters");
  retry->add_option("ids", a->retry_ids,
                    "Event ids (all must be dead letters, else none is retried)");
  retry->add_flag("--all", a->retry_all, "Every dead letter");
  add_dead_letter_filter_options(retry, a->filter, true);
  retry->add_flag("--verbose", a->verbose, "Print each id retried, one per line, before the count");
  auto* discard = sub->add_subcommand("discard", "Delete dead letters: by IDs, --all or filters");
  discard->add_option("ids", a->discard_ids,
                      "Event ids (all must be dead letters, else none is discarded)");
  discard->add_flag("--all", a->discard_all, "Every dead letter");
  add_dead_letter_filter_options(discard, a->filter, true);
  discard->add_flag("--verbose", a->verbose,
                    "Print each id discarded, one per line, before the count");

  return [a, stats, list, dead, archive, blocked, leased, show, retry, discard] {
    // Usage errors (the operation's arguments, the store URL) before touching the store.
    if (retry->parsed())
      check_operation("retry", a->retry_ids, a->retry_all, a->filter, a->verbose);
    if (discard->parsed())
      check_operation("discard", a->discard_ids, a->discard_all, a->filter, a->verbose);
    if (list->parsed() && a->filter.error)
      throw ConfigError(
          "list: --error is not available: the store's list of undelivered events carries no "
          "last error (see `events blocked` for failing key heads, `events show ID` for one "
          "event)");
    std::optional<Filter> filter;
    if ((list->parsed() || dead->parsed()) && a->filter.given()) filter = make_filter(a->filter);
    if (show->parsed() && !EventId::parse(a->show_id))
      throw ConfigError("show: '" + a->show_id + "' is not an event id (UUID)");
    check_store_url(a->store);
    // Inspecting creates nothing and needs no write access; retry/discard need an outbox.
    StoreOptions options;
    options.open = retry->parsed() || discard->parsed() ? StoreOptions::Open::existing
                                                        : StoreOptions::Open::read_only;
    auto store = open_store(a->store, options);
    if (stats->parsed()) return run_stats(*store, a->json);
    const Filter* f = filter ? &*filter : nullptr;
    if (list->parsed())
      return print_events<StoredEvent>(
          f, a->newest_first, a->list_limit, [&](std::size_t n) { return store->list(n); }, "list",
          "undelivered events");
    if (dead->parsed())
      return print_events<DeadEvent>(
          f, a->newest_first, a->dead_limit, [&](std::size_t n) { return store->dead(n); }, "dead",
          "dead letters");
    if (archive->parsed()) {
      std::string out;
      for (const auto& e : store->archived(a->archive_limit)) out += to_json(e) + "\n";
      std::cout << out;
      return kExitOk;
    }
    if (blocked->parsed() || leased->parsed()) {
      TimePoint at = now();
      std::string out;
      for (const auto& e :
           blocked->parsed() ? store->blocked(a->inspect_limit) : store->leased(a->inspect_limit))
        out += event_state_json(e, at).dump() + "\n";
      std::cout << out;
      return kExitOk;
    }
    if (show->parsed()) return run_show(*store, a->show_id);
    if (retry->parsed())
      return run_operation(*store, "retry", a->retry_ids, a->retry_all, a->filter, a->verbose);
    if (discard->parsed())
      return run_operation(*store, "discard", a->discard_ids, a->discard_all, a->filter,
                           a->verbose);
    throw ConfigError(
        "events: give one of stats, list, dead, blocked, leased, show, retry, discard");
  };
}

}  // namespace outpost::cli
