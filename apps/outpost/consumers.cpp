// outpost consumers: inspect consumer groups and handle their dead letters (docs/cli.md,
// "consumers").
//   outpost consumers --checkpoint STORE_URL list [--json]
//   outpost consumers --checkpoint STORE_URL dead --group NAME [--limit N] [FILTERS]
//                     [--newest-first]                                          JSON lines
//   outpost consumers --checkpoint STORE_URL retry --group NAME ID...|--all|FILTERS [--verbose]
//   outpost consumers --checkpoint STORE_URL discard --group NAME ID...|--all|FILTERS [--verbose]
//   outpost consumers --checkpoint STORE_URL seek --group NAME --to beginning|end|POSITION|TIME
//                     [--from LOG_URL] [--reprocess]
//   outpost consumers --checkpoint STORE_URL delete --group NAME [--from LOG_URL]
// IDs are dead-letter row ids (the "row" of `dead`) or event ids; FILTERS are those of `outpost
// events` (dead_letters.h). Dead letters print in the shape of `outpost events dead`.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli.h"
#include "consumer_groups.h"
#include "dead_letters.h"
#include "outpost/consumer.h"
#include "outpost/error.h"
#include "pipeline_limits.h"

namespace outpost::cli {
namespace {

// The checkpoint store reads a group's dead letters oldest first up to a bound and cannot page:
// filters, --newest-first and id checks read at most this many (and say so on stderr when there
// are more), as `outpost events` does.
constexpr std::size_t kMaxScan = 100'000;

struct ConsumersArgs {
  std::string checkpoint;
  bool json = false;
  std::string group;
  std::size_t limit = 100;
  DeadLetterFilterArgs filter;
  bool newest_first = false;
  bool verbose = false;
  std::vector<std::string> ids;
  bool all = false;
  std::string to;    // seek
  std::string from;  // seek, delete: the group's log with its credentials
  bool reprocess = false;
};

std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// Lag of one group, -1 when its log cannot be read from here (reported on stderr).
std::int64_t lag_of(const ConsumerGroupInfo& g) {
  try {
    auto source = open_source(g.source);
    if (auto lag = source->lag(g.position)) return *lag;
  } catch (const std::exception& e) {
    std::cerr << "outpost consumers: group '" << g.group << "': lag unknown: " << e.what() << "\n";
  }
  return -1;
}

int run_list(CheckpointStore& store, bool json) {
  auto groups = store.groups();
  if (!json) {
    std::cout << std::left << std::setw(20) << "GROUP"
              << " " << std::setw(12) << "POSITION"
              << " " << std::setw(8) << "LAG"
              << " " << std::setw(6) << "DEAD"
              << " FROM\n";
  }
  for (const auto& g : groups) {
    std::int64_t lag = lag_of(g);
    if (json) {
      std::cout << dump({{"group", g.group},
                         {"from", g.source},
                         {"position", g.position},
                         {"lag", lag},
                         {"dead", g.dead}})
                << "\n";
    } else {
      std::cout << std::left << std::setw(20) << g.group << " " << std::setw(12) << g.position
                << " " << std::setw(8) << lag << " " << std::setw(6) << g.dead << " " << g.source
                << "\n";
    }
  }
  return kExitOk;
}

// A group that is not in the store is exit 1 naming it (not an empty list: a misspelt group
// would look like one without dead letters).
bool has_group(CheckpointStore& store, const std::string& group) {
  if (store.group(group)) return true;
  std::cerr << "outpost: error: consumers: no consumer group '" << group << "' in "
            << redact(store.url()) << " (`consumers list` lists the groups)\n";
  return false;
}

std::string dead_letters(std::size_t n) {
  return std::to_string(n) + (n == 1 ? " dead letter" : " dead letters");
}

// Reads the group's dead letters: `limit` of them when nothing is filtered or reordered, else up
// to kMaxScan (warning when there are more), the filter's matches in the order asked for.
std::vector<ConsumerDeadLetter> read_dead(CheckpointStore& store, const std::string& group,
                                          const DeadLetterFilter* f, bool newest_first,
                                          std::size_t limit, const char* command) {
  if (!f && !newest_first) return store.dead(group, limit);
  DeadLetterFilter filter = f ? *f : DeadLetterFilter{};
  filter.start_clock();
  auto all = store.dead(group, kMaxScan);
  if (all.size() >= kMaxScan)
    std::cerr << "outpost: warning: " << command << ": group '" << group << "' has more than "
              << kMaxScan << " dead letters; only the oldest " << kMaxScan << " were read\n";
  std::erase_if(
      all, [&](const ConsumerDeadLetter& d) { return !decode_dead_letter(d).matches(filter); });
  if (newest_first) std::reverse(all.begin(), all.end());
  if (all.size() > limit) all.resize(limit);
  return all;
}

int run_dead(CheckpointStore& store, const ConsumersArgs& a, const DeadLetterFilter* f) {
  std::string out;
  for (const auto& d : read_dead(store, a.group, f, a.newest_first, a.limit, "dead"))
    out += dead_letter_json(decode_dead_letter(d)) + "\n";
  std::cout << out;
  return kExitOk;
}

// retry/discard: explicit ids, --all or filters, exactly one of them. Checked before the store
// is opened, so a usage error is exit 2 whatever the store holds.
void check_operation(const char* command, const ConsumersArgs& a) {
  const std::string c(command);
  int ways = int(!a.ids.empty()) + int(a.all) + int(a.filter.given());
  if (ways != 1)
    throw ConfigError(c + ": give dead-letter IDs, --all, or filters (--type, --key, --error, " +
                      "--older-than)" + (ways > 1 ? ", only one of them" : ""));
  if (a.all && a.verbose)
    throw ConfigError(c +
                      ": --verbose lists the ids acted on, which --all does not learn; "
                      "use a filter such as --older-than 0s instead");
  for (const auto& id : a.ids) {
    bool number = !id.empty() && id.find_first_not_of("0123456789") == std::string::npos;
    if (!number && !EventId::parse(id))
      throw ConfigError(c + ": '" + id +
                        "' is neither a dead-letter id (number) nor an event id (UUID)");
  }
  DeadLetterFilter::from(a.filter);
}

int run_operation(CheckpointStore& store, const char* command, const ConsumersArgs& a) {
  const bool retry = std::string_view(command) == "retry";
  const std::string done = std::string(retry ? "retried " : "discarded ");
  const std::string of_group = " of group '" + a.group + "'";
  if (a.all) {
    std::size_t n = retry ? store.retry_all(a.group) : store.discard_all(a.group);
    std::cout << done << dead_letters(n) << of_group << "\n";
    return kExitOk;
  }
  // The rows acted on, by row id (what an event id names may be parked more than once).
  std::vector<std::string> rows;
  if (!a.ids.empty()) {
    // All or nothing: every id must name a dead letter of the group, else nothing is changed.
    auto dead = store.dead(a.group, kMaxScan);
    std::multimap<std::string, std::string> rows_of;  // row id or event id -> row id
    for (const auto& d : dead) {
      rows_of.emplace(std::to_string(d.id), std::to_string(d.id));
      if (!d.event_id.empty()) rows_of.emplace(d.event_id, std::to_string(d.id));
    }
    std::set<std::string> chosen;
    std::string missing;
    for (const auto& id : a.ids) {
      auto event = EventId::parse(id);  // any case; stored lowercase
      auto [from, to] = rows_of.equal_range(event ? event->str() : id);
      if (from == to) missing += (missing.empty() ? "" : ", ") + id;
      for (auto it = from; it != to; ++it)
        if (chosen.insert(it->second).second) rows.push_back(it->second);
    }
    if (!missing.empty()) {
      std::cerr << "outpost: error: " << command << ": not a dead letter of group '" << a.group
                << "': " << missing;
      if (dead.size() >= kMaxScan)
        std::cerr << " (among the oldest " << kMaxScan << " dead letters read)";
      std::cerr << "; nothing was changed\n";
      return kExitRuntime;
    }
  } else {
    auto filter = DeadLetterFilter::from(a.filter);
    for (const auto& d : read_dead(store, a.group, &filter, false, kMaxScan, command))
      rows.push_back(std::to_string(d.id));
  }
  std::size_t n =
      rows.empty() ? 0 : (retry ? store.retry(a.group, rows) : store.discard(a.group, rows));
  std::string out;
  if (a.verbose)
    for (const auto& row : rows) out += row + "\n";
  out += done + dead_letters(n) + of_group;
  if (n < rows.size())
    out += " (" + std::to_string(rows.size()) + " matched; the others changed meanwhile)";
  std::cout << out << "\n";
  return kExitOk;
}

// The group's log: --from when given (the stored URL has its password redacted), else the URL
// the group was bound to.
std::unique_ptr<Source> open_group_log(CheckpointStore& store, const ConsumersArgs& a) {
  if (!a.from.empty()) return open_source(a.from);
  auto g = store.group(a.group);
  if (!g) throw Error(ErrorCode::not_found, "consumers", "no consumer group '" + a.group + "'");
  return open_source(g->source);
}

int run_seek(CheckpointStore& store, Source* from, const ConsumersArgs& a,
             const SeekTarget& target) {
  std::unique_ptr<Source> stored;
  if (!from) from = (stored = open_group_log(store, a)).get();
  GroupMove m = seek_consumer_group(store, *from, a.group, target, a.reprocess);
  std::cout << "moved group '" << a.group << "' (" << m.source << ") from "
            << shown_position(m.from) << " to " << shown_position(m.to) << "\n";
  if (a.reprocess) std::cout << "its inbox was emptied: messages read again are handled again\n";
  return kExitOk;
}

int run_delete(CheckpointStore& store, Source* from, const ConsumersArgs& a) {
  std::unique_ptr<Source> stored;
  if (!from) from = (stored = open_group_log(store, a)).get();
  DeletedGroup d = delete_consumer_group(store, *from, a.group);
  std::cout << "deleted group '" << a.group << "' (" << d.source << ", at "
            << shown_position(d.position) << "): " << dead_letters(std::size_t(d.dead)) << ", "
            << d.inbox << (d.inbox == 1 ? " inbox row" : " inbox rows") << "\n";
  return kExitOk;
}

}  // namespace

Runner add_consumers_command(CLI::App& root) {
  auto a = std::make_shared<ConsumersArgs>();
  CLI::App* sub = root.add_subcommand(
      "consumers", "Consumer groups: positions, lag, dead letters; move or delete a group.");
  sub->add_option("--checkpoint", a->checkpoint,
                  "Checkpoint store URL (sqlite:PATH or postgresql://...)")
      ->required();
  sub->require_subcommand(1, 1);
  sub->fallthrough();  // --checkpoint may also come after the operation

  auto* list = sub->add_subcommand("list", "Every group: position, lag, dead letters");
  list->add_flag("--json", a->json,
                 R"(One object per group per line: {"group","from","position","lag","dead"})");
  auto* dead = sub->add_subcommand(
      "dead", "A group's dead letters, oldest first, JSON lines (the shape of `events dead`)");
  dead->add_option("--group", a->group, "Consumer group")->required();
  add_limit_option(dead, a->limit, "At most N");
  add_dead_letter_filter_options(dead, a->filter, true);
  dead->add_flag("--newest-first", a->newest_first, "Newest first (default: oldest first)");
  auto* retry = sub->add_subcommand(
      "retry", "Dead letters back to the group's consumer (handled again, in order)");
  auto* discard = sub->add_subcommand("discard", "Delete dead letters");
  for (auto* op : {retry, discard}) {
    op->add_option("--group", a->group, "Consumer group")->required();
    op->add_option("ids", a->ids,
                   "Dead-letter row ids or event ids (all must be dead letters of the group, "
                   "else none is changed)");
    op->add_flag("--all", a->all, "Every dead letter of the group");
    add_dead_letter_filter_options(op, a->filter, true);
    op->add_flag("--verbose", a->verbose,
                 "Print the row id of each dead letter acted on, one per line, before the count");
  }

  auto* seek = sub->add_subcommand(
      "seek",
      "Move a group: its consumer reads on from the start or end of its log, a position, or "
      "the first message at or after a time");
  seek->add_option("--group", a->group, "Consumer group")->required();
  seek->add_option("--to", a->to,
                   "beginning, end, a position of the log (as `list` shows: OFFSET@FILE, "
                   "a stream entry id, PARTITION:OFFSET,..., a stream sequence) or an RFC 3339 "
                   "time (2026-11-26T09:00:00Z)")
      ->required();
  seek->add_flag("--reprocess", a->reprocess,
                 "Also empty the group's inbox, so messages it already handled are handled "
                 "again when read (default: skipped as duplicates)");
  auto* del = sub->add_subcommand(
      "delete",
      "Delete a group: its checkpoint, dead letters and inbox (and its hold on Redis Streams "
      "trimming); a consumer started later begins afresh");
  del->add_option("--group", a->group, "Consumer group")->required();
  for (auto* op : {seek, del})
    op->add_option("--from", a->from,
                   "The group's log URL with its credentials (default: the URL the group "
                   "recorded, password redacted)");

  return [a, list, dead, retry, discard, seek, del] {
    // Arguments first, then the URL, before anything is opened. A group name follows the rule
    // `consume` applies to it (pipeline_limits.h): no store holds another, and a control
    // character would reach the terminal in "no consumer group '...'".
    if (!list->parsed())
      if (std::string why = limits::group_error(a->group); !why.empty())
        throw ConfigError("consumers: --group " + why);
    if (retry->parsed()) check_operation("retry", *a);
    if (discard->parsed()) check_operation("discard", *a);
    std::optional<DeadLetterFilter> filter;
    if (dead->parsed() && a->filter.given()) filter = DeadLetterFilter::from(a->filter);
    std::optional<SeekTarget> target;
    if (seek->parsed()) target = parse_seek_target(a->to);
    check_checkpoint_store_url(a->checkpoint);
    // --from is checked (and opened: no source connects before it is used) before the store.
    std::unique_ptr<Source> from;
    if ((seek->parsed() || del->parsed()) && !a->from.empty()) from = open_source(a->from);
    // Inspection and dead-letter edits need consumer state that is there: a wrong path or
    // database is exit 1 naming it, and nothing is created.
    auto store = open_checkpoint_store(a->checkpoint, OpenMode::existing);
    if (list->parsed()) return run_list(*store, a->json);
    if (!has_group(*store, a->group)) return kExitRuntime;
    if (seek->parsed()) return run_seek(*store, from.get(), *a, *target);
    if (del->parsed()) return run_delete(*store, from.get(), *a);
    if (dead->parsed()) return run_dead(*store, *a, filter ? &*filter : nullptr);
    return run_operation(*store, retry->parsed() ? "retry" : "discard", *a);
  };
}

}  // namespace outpost::cli
