#pragma once
// Where consumers keep their state (include/outpost/consumer.h): checkpoints, the inbox and
// consumer dead letters in one SQLite or PostgreSQL database, so a consumer's effects, inbox rows
// and checkpoint commit in one transaction; and what operators see and do with them
// (`outpost consumers`, docs/consumers.md).
//
// Thread safety: a CheckpointStore object is used by one thread at a time (one connection).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/event.h"
#include "outpost/open_mode.h"
#include "outpost/tx.h"

namespace outpost {

class Consumer;

// What an operator sees of a consumer group.
struct ConsumerGroupInfo {
  std::string group;
  std::string source;     // the URL it reads (redacted)
  std::string position;   // its committed checkpoint
  std::int64_t dead = 0;  // parked messages (including those waiting for a retry)
  TimePoint updated_at;
};

struct ConsumerDeadLetter {
  std::int64_t id = 0;  // row id (what retry/discard take, besides event ids)
  std::string group;
  std::string event_id;  // empty for a message without id
  std::string key;
  std::string position;  // source position just after the message
  int attempts = 0;
  std::string error;
  std::string payload;  // the message as read
  std::string state;    // "dead", or "retry" (an operator asked for another attempt)
  TimePoint dead_at;
};

// What delete_group() removed.
struct DeletedGroup {
  std::string source;      // the URL the group read (redacted)
  std::string position;    // its checkpoint
  std::int64_t dead = 0;   // dead letters deleted
  std::int64_t inbox = 0;  // inbox rows deleted (event ids it had handled)
};

// Where consumers keep their state, inbox, checkpoints and dead letters:
//   sqlite:PATH[?prefix=outpost_consumer&busy_timeout_ms=30000]
//   postgresql://user@host:port/db[?prefix=outpost_consumer&connect_timeout=…&sslmode=…]
// Tables <prefix>_checkpoints, <prefix>_dead and <prefix>_inbox are created on first use.
class CheckpointStore {
 public:
  struct Impl;
  explicit CheckpointStore(std::unique_ptr<Impl> impl);
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  std::string url() const;  // redacted
  const std::string& prefix() const;
  // TxHandle::Kind::sqlite or ::postgres: what batch.tx() will be.
  TxHandle::Kind kind() const;

  std::vector<ConsumerGroupInfo> groups();
  std::optional<ConsumerGroupInfo> group(const std::string& group);
  std::vector<ConsumerDeadLetter> dead(const std::string& group, std::size_t limit);
  // `ids` are row ids or event ids. Retry: state -> "retry" (attempts reset); the running (or
  // next) consumer of the group handles them again, in row order, before reading on. Discard:
  // deleted. Both return how many rows they changed.
  std::size_t retry(const std::string& group, std::span<const std::string> ids);
  std::size_t retry_all(const std::string& group);
  std::size_t discard(const std::string& group, std::span<const std::string> ids);
  std::size_t discard_all(const std::string& group);

  // Moves `group` to `position` (of its log: Source::position_for), the position it had
  // returned; nullopt, nothing written, when there is no such group. A consumer of the group
  // that runs notices before its next read or at its next commit (that batch is rolled back)
  // and reads on from `position` (docs/consumers.md, "Moving and deleting a group"). The group's
  // inbox stays, so messages it handled before are skipped as duplicates when read again, unless
  // `reprocess` (the inbox rows of the group are deleted in the same transaction).
  std::optional<std::string> seek(const std::string& group, const std::string& position,
                                  bool reprocess = false);
  // Deletes the group's checkpoint, dead letters and inbox rows in one transaction; nullopt,
  // nothing deleted, when there is no such group. A consumer of the group that runs stops at
  // its next read or commit with Error(not_found) (nothing of that batch committed); one
  // started later begins the group afresh.
  std::optional<DeletedGroup> delete_group(const std::string& group);

  // Runs fn(tx) in a transaction of its own on the store's database (TxHandle::sqlite or
  // ::postgres, as batch.tx() is) and commits it; rolls it back and rethrows when fn throws. For
  // the state a program keeps beside its consumers (its tables, set up or read outside a batch).
  // The store's one connection: not while a Consumer on this object runs.
  void transaction(const std::function<void(TxHandle tx)>& fn);

 private:
  friend class Consumer;  // runs its batches on the store's connection
  std::unique_ptr<Impl> impl_;
};

// What opening may do: OpenMode (open_mode.h), the outbox's enum; CheckpointOpen is its older
// name here. create: make the database file and the tables when missing (consumers). existing:
// open only consumer state that is there (<prefix>_checkpoints and <prefix>_dead); none is
// ErrorCode::not_found naming the place, and nothing is created (not the SQLite file, not a
// table): `outpost consumers` inspects and edits with existing. read_only opens as existing
// (writes are not refused).
using CheckpointOpen = OpenMode;

// Throws ConfigError for a malformed URL (naming the part) before connecting, ConnectionError
// when the database cannot be reached.
std::unique_ptr<CheckpointStore> open_checkpoint_store(std::string_view url,
                                                       OpenMode open = OpenMode::create);
// Only the URL checks of open_checkpoint_store (for CLIs: validate everything before opening).
void check_checkpoint_store_url(std::string_view url);

}  // namespace outpost
