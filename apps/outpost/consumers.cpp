// outpost consumers: inspect consumer groups and handle their dead letters.
//   outpost consumers --checkpoint STORE_URL list [--json]
//   outpost consumers --checkpoint STORE_URL dead --group NAME [--limit N]     JSON lines
//   outpost consumers --checkpoint STORE_URL retry --group NAME ID...|--all
//   outpost consumers --checkpoint STORE_URL discard --group NAME ID...|--all
// IDs are dead-letter row ids (the "id" of `dead`) or event ids.

#include <nlohmann/json.hpp>

#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "outpost/consumer.h"
#include "outpost/error.h"

namespace outpost::cli {
namespace {

struct ConsumersArgs {
  std::string checkpoint;
  bool json = false;
  std::string group;
  std::size_t limit = 100;
  std::vector<std::string> ids;
  bool all = false;
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

int run_dead(CheckpointStore& store, const std::string& group, std::size_t limit) {
  std::string out;
  for (const auto& d : store.dead(group, limit)) {
    nlohmann::ordered_json j{{"id", d.id},
                             {"group", d.group},
                             {"event_id", d.event_id},
                             {"key", d.key},
                             {"position", d.position},
                             {"attempts", d.attempts},
                             {"error", d.error},
                             {"state", d.state},
                             {"payload", d.payload},
                             {"dead_at", format_rfc3339(d.dead_at)}};
    out += dump(j) + "\n";
  }
  std::cout << out;
  return kExitOk;
}

void check_ids(const char* command, const ConsumersArgs& a) {
  if (a.all && !a.ids.empty())
    throw ConfigError(std::string(command) + ": give dead-letter IDs or --all, not both");
  if (!a.all && a.ids.empty())
    throw ConfigError(std::string(command) + ": give dead-letter IDs or --all");
  for (const auto& id : a.ids) {
    bool number = !id.empty() && id.find_first_not_of("0123456789") == std::string::npos;
    if (!number && !EventId::parse(id))
      throw ConfigError(std::string(command) + ": '" + id +
                        "' is neither a dead-letter id (number) nor an event id (UUID)");
  }
}

}  // namespace

Runner add_consumers_command(CLI::App& root) {
  auto a = std::make_shared<ConsumersArgs>();
  CLI::App* sub =
      root.add_subcommand("consumers", "Consumer groups: positions, lag, dead letters.");
  sub->add_option("--checkpoint", a->checkpoint,
                  "Checkpoint store URL (sqlite:PATH or postgresql://...)")
      ->required();
  sub->require_subcommand(1, 1);
  sub->fallthrough();  // --checkpoint may also come after the operation

  auto* list = sub->add_subcommand("list", "Every group: position, lag, dead letters");
  list->add_flag("--json", a->json,
                 R"(One object per group per line: {"group","from","position","lag","dead"})");
  auto* dead = sub->add_subcommand("dead", "A group's dead letters, oldest first, JSON lines");
  dead->add_option("--group", a->group, "Consumer group")->required();
  dead->add_option("--limit", a->limit, "At most N")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000'000}));
  auto* retry = sub->add_subcommand(
      "retry", "Dead letters back to the group's consumer (handled again, in order)");
  retry->add_option("--group", a->group, "Consumer group")->required();
  retry->add_option("ids", a->ids, "Dead-letter ids or event ids");
  retry->add_flag("--all", a->all, "Every dead letter of the group");
  auto* discard = sub->add_subcommand("discard", "Delete dead letters");
  discard->add_option("--group", a->group, "Consumer group")->required();
  discard->add_option("ids", a->ids, "Dead-letter ids or event ids");
  discard->add_flag("--all", a->all, "Every dead letter of the group");

  return [a, list, dead, retry, discard] {
    // Arguments first, then the URL, before anything is opened.
    if (retry->parsed()) check_ids("retry", *a);
    if (discard->parsed()) check_ids("discard", *a);
    validate_checkpoint_store_url(a->checkpoint);
    // Inspection and dead-letter edits need consumer state that is there: a wrong path or
    // database is exit 1 naming it, and nothing is created.
    auto store = open_checkpoint_store(a->checkpoint, CheckpointOpen::existing);
    if (list->parsed()) return run_list(*store, a->json);
    if (dead->parsed()) return run_dead(*store, a->group, a->limit);
    bool is_retry = retry->parsed();
    std::size_t n =
        is_retry ? (a->all ? store->retry_all(a->group) : store->retry(a->group, a->ids))
                 : (a->all ? store->discard_all(a->group) : store->discard(a->group, a->ids));
    std::cout << (is_retry ? "retried " : "discarded ") << n << " dead letters of group '"
              << a->group << "'\n";
    return kExitOk;
  };
}

}  // namespace outpost::cli
