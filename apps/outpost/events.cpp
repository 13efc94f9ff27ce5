// outpost events: inspect and operate on the outbox.
//   outpost events --store URL stats [--json]
//   outpost events --store URL list [--limit N]        undelivered events, JSON lines
//   outpost events --store URL dead [--limit N]        dead letters, JSON lines + last_error
//   outpost events --store URL blocked [--limit N]     failing key heads, JSON lines
//   outpost events --store URL leased [--limit N]      events under a live lease, JSON lines
//   outpost events --store URL retry ID...|--all       dead -> pending (attempts 0)
//   outpost events --store URL discard ID...|--all     dead -> deleted

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "event_state_json.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/json.h"

namespace outpost::cli {
namespace {

struct EventsArgs {
  std::string store;
  bool json = false;
  std::size_t list_limit = 100;
  std::size_t dead_limit = 100;
  std::size_t inspect_limit = 100;
  std::vector<std::string> retry_ids;
  bool retry_all = false;
  std::vector<std::string> discard_ids;
  bool discard_all = false;
};

std::vector<EventId> parse_ids(const std::vector<std::string>& texts, const char* command) {
  std::vector<EventId> ids;
  for (const auto& t : texts) {
    auto id = EventId::parse(t);
    if (!id) throw ConfigError(std::string(command) + ": '" + t + "' is not an event id (UUID)");
    ids.push_back(*id);
  }
  return ids;
}

int run_stats(Store& store, bool json) {
  StoreStats s = store.stats();
  if (json) {
    nlohmann::json j{{"pending", s.pending},
                     {"leased", s.leased},
                     {"dead", s.dead},
                     {"archived", s.archived},
                     {"oldest_pending_age_ms", s.oldest_pending_age.count()}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "pending                " << s.pending << "\n"
              << "leased                 " << s.leased << "\n"
              << "dead                   " << s.dead << "\n"
              << "archived               " << s.archived << "\n"
              << "oldest_pending_age_ms  " << s.oldest_pending_age.count() << "\n";
  }
  return kExitOk;
}

int run_dead(Store& store, std::size_t limit) {
  std::string out;
  for (const DeadEvent& d : store.dead(limit)) out += to_json(d) + "\n";
  std::cout << out;
  return kExitOk;
}

// retry/discard share their shape: explicit ids or --all, never both, never neither. Checked
// before the store is opened, so a usage error is exit 2 whatever the store holds.
void check_operation(const char* command, const std::vector<std::string>& texts, bool all) {
  if (all && !texts.empty())
    throw ConfigError(std::string(command) + ": give event IDs or --all, not both");
  if (!all && texts.empty()) throw ConfigError(std::string(command) + ": give event IDs or --all");
  parse_ids(texts, command);
}

int run_operation(Store& store, const char* command, const std::vector<std::string>& texts,
                  bool all) {
  std::size_t n;
  bool retry = std::string_view(command) == "retry";
  if (all) {
    n = retry ? store.retry_all() : store.discard_all();
    std::cout << (retry ? "retried " : "discarded ") << n << " dead events\n";
    return kExitOk;
  }
  auto ids = parse_ids(texts, command);
  n = retry ? store.retry(ids) : store.discard(ids);
  std::cout << (retry ? "retried " : "discarded ") << n << " of " << ids.size() << " events";
  if (n < ids.size()) std::cout << " (the others are not dead letters)";
  std::cout << "\n";
  return kExitOk;
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
  list->add_option("--limit", a->list_limit, "At most N events")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000'000}));
  auto* dead = sub->add_subcommand("dead", "Dead letters, oldest first, JSON lines + last_error");
  dead->add_option("--limit", a->dead_limit, "At most N events")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000'000}));
  auto* blocked = sub->add_subcommand(
      "blocked", "Keys whose head event failed (ordered mode: the key waits), JSON lines");
  auto* leased = sub->add_subcommand("leased", "Events under a live lease, JSON lines");
  for (auto* inspect : {blocked, leased})
    inspect->add_option("--limit", a->inspect_limit, "At most N events")
        ->capture_default_str()
        ->check(CLI::Range(std::size_t{1}, std::size_t{100'000'000}));
  auto* retry = sub->add_subcommand("retry", "Dead letters back to pending (attempts reset)");
  retry->add_option("ids", a->retry_ids, "Event ids");
  retry->add_flag("--all", a->retry_all, "Every dead letter");
  auto* discard = sub->add_subcommand("discard", "Delete dead letters");
  discard->add_option("ids", a->discard_ids, "Event ids");
  discard->add_flag("--all", a->discard_all, "Every dead letter");

  return [a, stats, list, dead, blocked, leased, retry, discard] {
    // Usage errors (the operation's arguments, the store URL) before touching the store.
    if (retry->parsed()) check_operation("retry", a->retry_ids, a->retry_all);
    if (discard->parsed()) check_operation("discard", a->discard_ids, a->discard_all);
    check_store_url(a->store);
    // Inspecting creates nothing and needs no write access; retry/discard need an outbox.
    StoreOptions options;
    options.open =
        stats->parsed() || list->parsed() || dead->parsed() || blocked->parsed() || leased->parsed()
            ? StoreOptions::Open::read_only
            : StoreOptions::Open::existing;
    auto store = open_store(a->store, options);
    if (stats->parsed()) return run_stats(*store, a->json);
    if (list->parsed()) {
      std::string out;
      for (const auto& e : store->list(a->list_limit)) out += to_json(e) + "\n";
      std::cout << out;
      return kExitOk;
    }
    if (dead->parsed()) return run_dead(*store, a->dead_limit);
    if (blocked->parsed() || leased->parsed()) {
      TimePoint at = now();
      std::string out;
      for (const auto& e :
           blocked->parsed() ? store->blocked(a->inspect_limit) : store->leased(a->inspect_limit))
        out += event_state_json(e, at).dump() + "\n";
      std::cout << out;
      return kExitOk;
    }
    if (retry->parsed()) return run_operation(*store, "retry", a->retry_ids, a->retry_all);
    if (discard->parsed()) return run_operation(*store, "discard", a->discard_ids, a->discard_all);
    throw ConfigError("events: give one of stats, list, dead, blocked, leased, retry, discard");
  };
}

}  // namespace outpost::cli
