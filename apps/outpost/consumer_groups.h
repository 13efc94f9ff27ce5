#pragma once
// Moving and deleting a consumer group, for `outpost consumers seek|delete` and the dashboard's
// consumers page alike (docs/consumers.md, "Moving and deleting a group"). Built with
// outpost_consume only.

#include <string>
#include <string_view>

#include "outpost/checkpoint_store.h"
#include "outpost/source.h"

namespace outpost::cli {

// `--to`: beginning, end, an RFC 3339 time, or a position of the group's log. ConfigError
// naming `what` and the text when it is empty.
SeekTarget parse_seek_target(std::string_view to, std::string_view what = "--to");

struct GroupMove {
  std::string source;  // the log (redacted)
  std::string from;    // the position it had ("" = the beginning)
  std::string to;      // the position it has now
};

// Resolves `target` in `log` (the group's log, checked against the one it is bound to), writes
// it (CheckpointStore::seek) and then the log's registration (Redis Streams' trimming registry).
// Throws Error(not_found) naming the group when there is none (nothing written), ConfigError
// for a position the log does not take (naming `what` and the targets it takes) or a log the
// group does not read.
GroupMove seek_consumer_group(CheckpointStore& store, Source& log, const std::string& group,
                              const SeekTarget& target, bool reprocess,
                              std::string_view what = "--to");
// Drops the log's registration of the group, then deletes its checkpoint, dead letters and
// inbox rows (CheckpointStore::delete_group). Same errors as seek_consumer_group.
DeletedGroup delete_consumer_group(CheckpointStore& store, Source& log, const std::string& group);

// "the beginning" for "", else the position itself: how positions are printed.
std::string shown_position(const std::string& position);

}  // namespace outpost::cli
