#include "consumer_groups.h"

#include "outpost/error.h"

namespace outpost::cli {
namespace {

Error no_group(const CheckpointStore& store, const std::string& group) {
  return Error(ErrorCode::not_found, "consumers",
               "no consumer group '" + group + "' in " + store.url() +
                   " (`outpost consumers list` lists the groups); nothing was changed");
}

// The group's record, and that `log` is the log it reads.
ConsumerGroupInfo bound_group(CheckpointStore& store, Source& log, const std::string& group) {
  auto g = store.group(group);
  if (!g) throw no_group(store, group);
  if (!log.same_log(g->source))
    throw ConfigError("consumer group '" + group + "' reads '" + g->source + "', not '" +
                      log.url() + "' (--from names the group's log)");
  return *g;
}

}  // namespace

SeekTarget parse_seek_target(std::string_view to, std::string_view what) {
  SeekTarget t;
  if (to == "beginning") {
    t.kind = SeekTarget::Kind::beginning;
  } else if (to == "end") {
    t.kind = SeekTarget::Kind::end;
  } else if (auto time = parse_rfc3339(to)) {
    t.kind = SeekTarget::Kind::time;
    t.time = *time;
  } else if (to.empty()) {
    throw ConfigError(std::string(what) +
                      " is empty: give beginning, end, a position of the group's log, or an "
                      "RFC 3339 time (2026-11-26T09:00:00Z)");
  } else {
    t.kind = SeekTarget::Kind::position;
    t.position = std::string(to);
  }
  return t;
}

std::string shown_position(const std::string& position) {
  return position.empty() ? "the beginning" : position;
}

GroupMove seek_consumer_group(CheckpointStore& store, Source& log, const std::string& group,
                              const SeekTarget& target, bool reprocess, std::string_view what) {
  auto g = bound_group(store, log, group);
  GroupMove m;
  m.source = g.source;
  try {
    m.to = log.position_for(target);  // reads the log; a bad position is a ConfigError naming it
  } catch (const ConfigError& e) {
    // Text that is neither a keyword nor a time was taken for a position: say what `what` takes
    // before the log's own words about its positions.
    // A well-formed position past the log's end is named as such by every source (wording
    // pinned by SourceConformance.APositionPastTheEndOfTheLogIsRefusedNamingTheEnd): as is.
    if (target.kind != SeekTarget::Kind::position ||
        std::string_view(e.what()).find("' is past the end of ") != std::string_view::npos)
      throw;
    throw ConfigError(std::string(what) + " '" + target.position +
                      "': expected beginning, end, a position of the group's log or an RFC 3339 "
                      "time (2026-11-26T09:00:00Z); as a position: " +
                      e.what());
  }
  auto old = store.seek(group, m.to, reprocess);
  if (!old) throw no_group(store, group);  // deleted meanwhile
  m.from = *old;
  log.set_registration(group, m.to);
  return m;
}

DeletedGroup delete_consumer_group(CheckpointStore& store, Source& log, const std::string& group) {
  bound_group(store, log, group);
  // The registration first: should the delete then fail, a consumer still running registers
  // again at its next commit, while a registration left behind would hold trimming forever.
  log.set_registration(group, std::nullopt);
  auto d = store.delete_group(group);
  if (!d) throw no_group(store, group);
  return *d;
}

}  // namespace outpost::cli
