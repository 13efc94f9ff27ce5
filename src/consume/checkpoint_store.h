#pragma once
// The checkpoint store's rows (include/outpost/consumer.h): checkpoints, consumer dead letters
// and the inbox, all in one SQLite or PostgreSQL database, so a consumer's state, inbox rows and
// checkpoint commit in one transaction. Every rule about those tables lives here.

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "consume/sql.h"
#include "outpost/consumer.h"

namespace outpost {

struct CheckpointStore::Impl {
  std::unique_ptr<consume::SqlConnection> conn;
  std::string url;  // redacted
  std::string prefix;
  TxHandle::Kind kind = TxHandle::Kind::sqlite;
  bool create_tables = true;  // false: OpenMode::existing, the tables were checked at open

  std::string table(const char* suffix) const { return prefix + suffix; }

  // Runs fn(tx) in its own transaction (tables ensured first) and commits; rolls back on throw.
  template <class Fn>
  auto in_tx(Fn&& fn) {
    consume::SqlTx tx = begin();
    try {
      if constexpr (std::is_void_v<decltype(fn(tx))>) {
        fn(tx);
        conn->commit();
      } else {
        auto r = fn(tx);
        conn->commit();
        return r;
      }
    } catch (...) {
      conn->rollback();
      throw;
    }
  }
  consume::SqlTx begin();  // BEGIN + tables ensured (created when create_tables)

  struct Checkpoint {
    std::string source, position;
    std::int64_t gen = 0;  // bumped by each seek (CheckpointStore::seek)
  };
  std::optional<Checkpoint> load(const consume::SqlTx& tx, const std::string& group);
  void save(const consume::SqlTx& tx, const std::string& group, const std::string& source,
            const std::string& position);
  // save() of a group that is at generation `gen`: false (nothing written) when an operator
  // moved or deleted it since (docs/consumers.md, "Moving and deleting a group").
  bool save_at(const consume::SqlTx& tx, const std::string& group, const std::string& source,
               const std::string& position, std::int64_t gen);
  void park(const consume::SqlTx& tx, const std::string& group, const Message& m, int attempts,
            const std::string& error);
  // Keys (non-empty) with a parked or retry-pending message in `group`.
  std::set<std::string> parked_keys(const consume::SqlTx& tx, const std::string& group);
  std::vector<ConsumerDeadLetter> retries(const consume::SqlTx& tx, const std::string& group,
                                          std::size_t limit);
  void remove_dead(const consume::SqlTx& tx, std::int64_t id);
  void repark(const consume::SqlTx& tx, std::int64_t id, int attempts, const std::string& error);
};

}  // namespace outpost
