// The inbox (include/outpost/inbox.h): event ids recorded in the consumer's own transaction.
// Every statement goes through SqlTx, so SQLite and PostgreSQL follow the same rules.

#include "outpost/inbox.h"

#include <iostream>
#include <mutex>
#include <set>
#include <unordered_set>

#include "consume/inbox_sql.h"
#include "consume/schema.h"
#include "consume/sql.h"
#include "core/names.h"
#include "outpost/error.h"

namespace outpost {
namespace {

std::string ids_json(std::span<const EventId> ids) {
  std::string out;
  out.reserve(2 + ids.size() * 39);  // "8-4-4-4-12",
  out += '[';
  for (const auto& id : ids) {
    if (out.size() > 1) out += ',';
    out += '"';
    out += id.str();
    out += '"';
  }
  out += ']';
  return out;
}

std::string millis(Duration d) {
  return std::to_string(d.count());
}

}  // namespace

std::optional<std::string> check_dedup_window(Duration retention, const RetryHorizon& upstream) {
  if (retention.count() <= 0 || upstream.span().count() <= 0) return std::nullopt;
  if (retention > upstream.span()) return std::nullopt;
  return "inbox retention " + millis(retention) +
         " ms is not longer than the upstream relay's redelivery horizon " +
         millis(upstream.span()) + " ms (lease " + millis(upstream.lease) + " + backoff_max " +
         millis(upstream.backoff_max) + " x " + std::to_string(upstream.max_attempts) +
         " attempts): a late duplicate can arrive after its id was purged and run its effect twice";
}

Inbox::Inbox(InboxOptions options) : options_(std::move(options)) {
  core::require_identifier(options_.name, "inbox name");
  if (options_.name.size() > 57)
    throw ConfigError("inbox name '" + options_.name +
                      "' is invalid: at most 57 characters (the table is <name>_inbox)");
  if (options_.consumer.empty() || options_.consumer.size() > 200)
    throw ConfigError("inbox consumer name must be 1 to 200 bytes, got " +
                      std::to_string(options_.consumer.size()));
  if (options_.retention.count() < 0) throw ConfigError("inbox retention must not be negative");
  if (auto warning = check_dedup_window(options_.retention, options_.upstream)) {
    if (options_.on_warning)
      options_.on_warning(*warning);
    else
      std::cerr << "outpost: warning: " << *warning << "\n";
  }
}

void Inbox::ensure_table(TxHandle tx) const {
  consume::ensure_inbox_table(consume::SqlTx(tx), table());
}

bool Inbox::record(const EventId& id, TxHandle tx) const {
  return record_new(std::span<const EventId>(&id, 1), tx)[0];
}

namespace consume {

std::vector<bool> inbox_record_new(const Inbox& inbox, const SqlTx& sql,
                                   std::span<const EventId> ids) {
  std::vector<bool> fresh(ids.size(), false);
  if (ids.empty()) return fresh;
  const std::string table = inbox.table();
  ensure_inbox_table(sql, table);
  // One statement for the whole batch: the rows that were inserted are the new ids. A conflicting
  // row of a concurrent, uncommitted transaction makes this statement wait for its outcome.
  auto rows =
      sql.query("INSERT INTO " + table + " (consumer, event_id, recorded_at) SELECT $1, value, " +
                    sql.now_ms() + " FROM " + sql.json_text_elements(2) +
                    " WHERE true ON CONFLICT DO NOTHING RETURNING event_id",
                {inbox.options().consumer, ids_json(ids)});
  // The rows hold the ids as ids_json wrote them (canonical text): compare them as ids.
  std::unordered_set<EventId, EventIdHash> inserted;
  inserted.reserve(rows.size());
  for (auto& r : rows)
    if (r[0])
      if (auto id = EventId::parse(*r[0])) inserted.insert(*id);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto it = inserted.find(ids[i]);
    if (it == inserted.end()) continue;
    fresh[i] = true;
    inserted.erase(it);  // a second occurrence in the same batch is a duplicate
  }
  return fresh;
}

void inbox_forget(const Inbox& inbox, const SqlTx& sql, std::span<const EventId> ids) {
  if (ids.empty()) return;
  const std::string table = inbox.table();
  ensure_inbox_table(sql, table);
  sql.exec("DELETE FROM " + table + " WHERE consumer = $1 AND event_id IN (SELECT value FROM " +
               sql.json_text_elements(2) + ")",
           {inbox.options().consumer, ids_json(ids)});
}

std::size_t inbox_purge(const Inbox& inbox, const SqlTx& sql, Duration age) {
  if (age.count() <= 0) return 0;
  const std::string table = inbox.table();
  ensure_inbox_table(sql, table);
  return static_cast<std::size_t>(sql.exec("DELETE FROM " + table +
                                               " WHERE consumer = $1 AND recorded_at < " +
                                               sql.now_ms() + " - CAST($2 AS BIGINT)",
                                           {inbox.options().consumer, millis(age)}));
}

}  // namespace consume

std::vector<bool> Inbox::record_new(std::span<const EventId> ids, TxHandle tx) const {
  if (ids.empty()) return {};
  return consume::inbox_record_new(*this, consume::SqlTx(tx), ids);
}

void Inbox::forget(std::span<const EventId> ids, TxHandle tx) const {
  if (ids.empty()) return;
  consume::inbox_forget(*this, consume::SqlTx(tx), ids);
}

bool Inbox::contains(const EventId& id, TxHandle tx) const {
  consume::SqlTx sql(tx);
  consume::ensure_inbox_table(sql, table());
  return !sql.query("SELECT 1 FROM " + table() + " WHERE consumer = $1 AND event_id = $2",
                    {options_.consumer, id.str()})
              .empty();
}

std::size_t Inbox::purge(TxHandle tx, std::optional<Duration> older_than) const {
  Duration age = older_than.value_or(options_.retention);
  if (age.count() <= 0) return 0;
  return consume::inbox_purge(*this, consume::SqlTx(tx), age);
}

}  // namespace outpost
