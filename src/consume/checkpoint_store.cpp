#include "consume/checkpoint_store.h"

#include <algorithm>

#include "consume/message.h"
#include "consume/schema.h"
#include "core/names.h"
#include "core/url.h"
#include "outpost/error.h"
#ifdef OUTPOST_CONSUME_HAVE_POSTGRES
#include "stores/postgres/config.h"
#endif

namespace outpost {
namespace {

using consume::Param;
using consume::Row;
using consume::SqlTx;

struct ParsedUrl {
  enum class Kind { sqlite, postgres } kind;
  std::string prefix = "outpost_consumer";
  std::string path;  // sqlite
  int busy_timeout_ms = 30000;
  std::vector<std::string> keys, values;  // postgres
  Duration io_timeout{10'000};            // postgres: timeout_ms, the store's default
  std::string where;
  std::string redacted;
};

ParsedUrl parse_url(std::string_view text) {
  auto url = core::Url::parse(text);
  ParsedUrl p;
  p.redacted = url.redacted();
  if (url.scheme() == "sqlite") {
    p.kind = ParsedUrl::Kind::sqlite;
    p.path = url.path();
    if (url.hierarchical()) p.path = "/" + url.path();
    if (p.path.empty())
      throw ConfigError("bad URL '" + p.redacted + "': sqlite: needs a path, e.g. sqlite:state.db");
    if (auto v = url.int_param("busy_timeout_ms", 0, 86'400'000))
      p.busy_timeout_ms = static_cast<int>(*v);
    p.where = "sqlite:" + p.path;
  } else if (url.scheme() == "postgresql" || url.scheme() == "postgres") {
    p.kind = ParsedUrl::Kind::postgres;
    if (!url.hierarchical())
      throw ConfigError("bad URL '" + p.redacted + "': use postgresql://user@host:port/db");
#ifdef OUTPOST_CONSUME_HAVE_POSTGRES
    // The outbox store's own parse of the connection (libpq's values checked, connect_timeout
    // 5 s and application_name by default, timeout_ms): one URL connects alike in both
    // (docs/consumers.md, "Checkpointed consumers").
    pg::Endpoint ep = pg::parse_endpoint(url);
    p.keys = std::move(ep.keys);
    p.values = std::move(ep.values);
    p.io_timeout = ep.timeout;
    p.where = std::move(ep.where);
#else
    throw ConfigError("this build has no PostgreSQL support (postgresql:// checkpoint stores)");
#endif
  } else {
    throw ConfigError("bad checkpoint store URL '" + p.redacted + "': scheme '" + url.scheme() +
                      "' is not supported (use sqlite:PATH or postgresql://…)");
  }
  if (auto v = url.param("prefix")) p.prefix = *v;
  core::require_identifier(p.prefix, "prefix");
  if (p.prefix.size() > 48)
    throw ConfigError("prefix '" + p.prefix + "' is invalid: at most 48 characters");
  url.reject_unknown();
  return p;
}

std::int64_t to_i64(const Param& p) {
  return p ? std::stoll(*p) : 0;
}
TimePoint from_ms(const Param& p) {
  return TimePoint(std::chrono::milliseconds(to_i64(p)));
}
std::string str(const Param& p) {
  return p.value_or("");
}

bool is_row_id(const std::string& s) {
  return !s.empty() && s.size() < 19 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// " AND (id = $n OR event_id = $n+1 ...)" for a list of row ids / event ids. Event ids are
// normalised (lowercase canonical form); anything else is a ConfigError naming it.
std::string id_filter(std::span<const std::string> ids, std::vector<Param>& params) {
  std::string clause;
  for (const auto& text : ids) {
    params.emplace_back(text);
    std::string n = "$" + std::to_string(params.size());
    std::string one;
    if (is_row_id(text)) {
      one = "id = CAST(" + n + " AS BIGINT)";
    } else if (auto id = EventId::parse(text)) {
      params.back() = id->str();
      one = "event_id = " + n;
    } else {
      throw ConfigError("'" + text +
                        "' is neither a dead-letter id (number) nor an event id (UUID)");
    }
    clause += (clause.empty() ? "" : " OR ") + one;
  }
  return " AND (" + clause + ")";
}

ConsumerDeadLetter dead_from(const Row& r) {
  ConsumerDeadLetter d;
  d.id = to_i64(r[0]);
  d.group = str(r[1]);
  d.event_id = str(r[2]);
  d.key = str(r[3]);
  d.position = str(r[4]);
  d.attempts = static_cast<int>(to_i64(r[5]));
  d.error = str(r[6]);
  d.payload = str(r[7]);
  d.state = str(r[8]);
  d.dead_at = from_ms(r[9]);
  return d;
}

constexpr const char* kDeadColumns =
    "id, grp, event_id, msg_key, position, attempts, error, payload, state, dead_at";

}  // namespace

SqlTx CheckpointStore::Impl::begin() {
  SqlTx tx = conn->begin();
  if (!create_tables) return tx;
  try {
    consume::ensure_consumer_tables(tx, prefix);
    consume::ensure_inbox_table(tx, prefix + "_inbox");
  } catch (...) {
    conn->rollback();
    throw;
  }
  return tx;
}

std::optional<CheckpointStore::Impl::Checkpoint> CheckpointStore::Impl::load(
    const SqlTx& tx, const std::string& group) {
  auto rows = tx.query(
      "SELECT source, position, gen FROM " + table("_checkpoints") + " WHERE grp = $1", {group});
  if (rows.empty()) return std::nullopt;
  return Checkpoint{str(rows[0][0]), str(rows[0][1]), to_i64(rows[0][2])};
}

bool CheckpointStore::Impl::save_at(const SqlTx& tx, const std::string& group,
                                    const std::string& source, const std::string& position,
                                    std::int64_t gen) {
  return tx.exec("UPDATE " + table("_checkpoints") +
                     " SET source = $2, position = $3, updated_at = " + tx.now_ms() +
                     " WHERE grp = $1 AND gen = CAST($4 AS BIGINT)",
                 {group, source, position, std::to_string(gen)}) == 1;
}

void CheckpointStore::Impl::save(const SqlTx& tx, const std::string& group,
                                 const std::string& source, const std::string& position) {
  tx.exec("INSERT INTO " + table("_checkpoints") +
              " (grp, source, position, updated_at) VALUES ($1, $2, $3, " + tx.now_ms() +
              ") ON CONFLICT (grp) DO UPDATE SET source = excluded.source, position = "
              "excluded.position, updated_at = excluded.updated_at",
          {group, source, position});
}

void CheckpointStore::Impl::park(const SqlTx& tx, const std::string& group, const Message& m,
                                 int attempts, const std::string& error) {
  tx.exec("INSERT INTO " + table("_dead") +
              " (grp, event_id, msg_key, position, attempts, error, payload, state, dead_at) "
              "VALUES ($1, $2, $3, $4, CAST($5 AS INTEGER), $6, $7, 'dead', " +
              tx.now_ms() + ")",
          {group, m.event.id.is_nil() ? std::string() : m.event.id.str(), m.event.key, m.position,
           std::to_string(attempts), error, consume::dead_letter_payload(m)});
}

std::set<std::string> CheckpointStore::Impl::parked_keys(const SqlTx& tx,
                                                         const std::string& group) {
  std::set<std::string> keys;
  for (auto& r : tx.query(
           "SELECT DISTINCT msg_key FROM " + table("_dead") + " WHERE grp = $1 AND msg_key <> ''",
           {group}))
    keys.insert(str(r[0]));
  return keys;
}

std::vector<ConsumerDeadLetter> CheckpointStore::Impl::retries(const SqlTx& tx,
                                                               const std::string& group,
                                                               std::size_t limit) {
  std::vector<ConsumerDeadLetter> out;
  for (auto& r : tx.query(std::string("SELECT ") + kDeadColumns + " FROM " + table("_dead") +
                              " WHERE grp = $1 AND state = 'retry' ORDER BY id LIMIT " +
                              std::to_string(limit),
                          {group}))
    out.push_back(dead_from(r));
  return out;
}

void CheckpointStore::Impl::remove_dead(const SqlTx& tx, std::int64_t id) {
  tx.exec("DELETE FROM " + table("_dead") + " WHERE id = CAST($1 AS BIGINT)", {std::to_string(id)});
}

void CheckpointStore::Impl::repark(const SqlTx& tx, std::int64_t id, int attempts,
                                   const std::string& error) {
  tx.exec("UPDATE " + table("_dead") + " SET state = 'dead', attempts = CAST($2 AS INTEGER), " +
              "error = $3, dead_at = " + tx.now_ms() + " WHERE id = CAST($1 AS BIGINT)",
          {std::to_string(id), std::to_string(attempts), error});
}

CheckpointStore::CheckpointStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointStore::~CheckpointStore() = default;
std::string CheckpointStore::url() const {
  return impl_->url;
}
const std::string& CheckpointStore::prefix() const {
  return impl_->prefix;
}
TxHandle::Kind CheckpointStore::kind() const {
  return impl_->kind;
}

void CheckpointStore::transaction(const std::function<void(TxHandle)>& fn) {
  impl_->in_tx([&](consume::SqlTx& tx) { fn(tx.handle()); });
}

std::vector<ConsumerGroupInfo> CheckpointStore::groups() {
  return impl_->in_tx([&](SqlTx& tx) {
    std::vector<ConsumerGroupInfo> out;
    for (auto& r :
         tx.query("SELECT c.grp, c.source, c.position, c.updated_at, (SELECT count(*) FROM " +
                  impl_->table("_dead") + " d WHERE d.grp = c.grp) FROM " +
                  impl_->table("_checkpoints") + " c ORDER BY c.grp"))
      out.push_back({str(r[0]), str(r[1]), str(r[2]), to_i64(r[4]), from_ms(r[3])});
    return out;
  });
}

std::optional<ConsumerGroupInfo> CheckpointStore::group(const std::string& group) {
  for (auto& g : groups())
    if (g.group == group) return g;
  return std::nullopt;
}

std::vector<ConsumerDeadLetter> CheckpointStore::dead(const std::string& group, std::size_t limit) {
  return impl_->in_tx([&](SqlTx& tx) {
    std::vector<ConsumerDeadLetter> out;
    for (auto& r :
         tx.query(std::string("SELECT ") + kDeadColumns + " FROM " + impl_->table("_dead") +
                      " WHERE grp = $1 ORDER BY id LIMIT " + std::to_string(limit),
                  {group}))
      out.push_back(dead_from(r));
    return out;
  });
}

std::size_t CheckpointStore::retry(const std::string& group, std::span<const std::string> ids) {
  if (ids.empty()) return 0;
  std::vector<Param> params{group};
  std::string filter = id_filter(ids, params);  // validates before opening a transaction
  return impl_->in_tx([&](SqlTx& tx) {
    return static_cast<std::size_t>(tx.exec("UPDATE " + impl_->table("_dead") +
                                                " SET state = 'retry', attempts = 0 WHERE grp = $1 "
                                                "AND state = 'dead'" +
                                                filter,
                                            params));
  });
}

std::size_t CheckpointStore::retry_all(const std::string& group) {
  return impl_->in_tx([&](SqlTx& tx) {
    return static_cast<std::size_t>(
        tx.exec("UPDATE " + impl_->table("_dead") +
                    " SET state = 'retry', attempts = 0 WHERE grp = $1 AND state = 'dead'",
                {group}));
  });
}

std::size_t CheckpointStore::discard(const std::string& group, std::span<const std::string> ids) {
  if (ids.empty()) return 0;
  std::vector<Param> params{group};
  std::string filter = id_filter(ids, params);
  return impl_->in_tx([&](SqlTx& tx) {
    return static_cast<std::size_t>(
        tx.exec("DELETE FROM " + impl_->table("_dead") + " WHERE grp = $1" + filter, params));
  });
}

std::size_t CheckpointStore::discard_all(const std::string& group) {
  return impl_->in_tx([&](SqlTx& tx) {
    return static_cast<std::size_t>(
        tx.exec("DELETE FROM " + impl_->table("_dead") + " WHERE grp = $1", {group}));
  });
}

std::optional<std::string> CheckpointStore::seek(const std::string& group,
                                                 const std::string& position, bool reprocess) {
  // A program that only used checkpoints may have no inbox table: nothing to forget there.
  const bool inbox = impl_->conn->has_table(impl_->table("_inbox"));
  return impl_->in_tx([&](SqlTx& tx) -> std::optional<std::string> {
    consume::ensure_checkpoint_generation(tx, impl_->prefix);
    // FOR UPDATE on PostgreSQL: the position printed as the old one is the one replaced (a
    // consumer's commit in between waits or makes this wait). SQLite's BEGIN IMMEDIATE already
    // holds the write lock.
    auto rows =
        tx.query("SELECT position FROM " + impl_->table("_checkpoints") + " WHERE grp = $1" +
                     (tx.dialect() == consume::Dialect::postgres ? " FOR UPDATE" : ""),
                 {group});
    if (rows.empty()) return std::nullopt;
    tx.exec("UPDATE " + impl_->table("_checkpoints") + " SET position = $2, gen = gen + 1, " +
                "updated_at = " + tx.now_ms() + " WHERE grp = $1",
            {group, position});
    if (reprocess && inbox) {
      tx.exec("DELETE FROM " + impl_->table("_inbox") + " WHERE consumer = $1", {group});
    }
    return str(rows[0][0]);
  });
}

std::optional<DeletedGroup> CheckpointStore::delete_group(const std::string& group) {
  const bool inbox = impl_->conn->has_table(impl_->table("_inbox"));
  return impl_->in_tx([&](SqlTx& tx) -> std::optional<DeletedGroup> {
    auto rows = tx.query("SELECT source, position FROM " + impl_->table("_checkpoints") +
                             " WHERE grp = $1" +
                             (tx.dialect() == consume::Dialect::postgres ? " FOR UPDATE" : ""),
                         {group});
    if (rows.empty()) return std::nullopt;
    DeletedGroup d;
    d.source = str(rows[0][0]);
    d.position = str(rows[0][1]);
    tx.exec("DELETE FROM " + impl_->table("_checkpoints") + " WHERE grp = $1", {group});
    d.dead = tx.exec("DELETE FROM " + impl_->table("_dead") + " WHERE grp = $1", {group});
    if (inbox)
      d.inbox = tx.exec("DELETE FROM " + impl_->table("_inbox") + " WHERE consumer = $1", {group});
    return d;
  });
}

void check_checkpoint_store_url(std::string_view url) {
  parse_url(url);
}

std::unique_ptr<CheckpointStore> open_checkpoint_store(std::string_view text, OpenMode open) {
  ParsedUrl p = parse_url(text);
  auto impl = std::make_unique<CheckpointStore::Impl>();
  impl->url = p.redacted;
  impl->prefix = p.prefix;
  impl->create_tables = open == OpenMode::create;
  if (p.kind == ParsedUrl::Kind::sqlite) {
    impl->kind = TxHandle::Kind::sqlite;
    impl->conn = consume::open_sqlite_connection(p.path, p.busy_timeout_ms, impl->create_tables);
  } else {
    impl->kind = TxHandle::Kind::postgres;
    impl->conn = consume::open_postgres_connection(p.keys, p.values, p.where, p.io_timeout);
  }
  if (!impl->create_tables) {
    // Same rule on every engine: no consumer tables, no consumer state; say so, create nothing.
    for (const char* suffix : {"_checkpoints", "_dead"}) {
      if (impl->conn->has_table(impl->table(suffix))) continue;
      throw Error(ErrorCode::not_found,
                  impl->kind == TxHandle::Kind::sqlite ? "sqlite" : "postgres",
                  "there is no consumer state at '" + impl->conn->where() + "': no table '" +
                      impl->table(suffix) + "' (nothing was created)");
    }
  }
  return std::make_unique<CheckpointStore>(std::move(impl));
}

}  // namespace outpost
