#pragma once
// A handle on the caller's own open transaction, so an event is written in the same
// transaction as the caller's business data (guarantee 1, atomic emit).

struct sqlite3;
struct pg_conn;       // libpq's PGconn
struct redisContext;  // hiredis

namespace outpost {

class TxHandle {
 public:
  enum class Kind {
    none,      // no caller transaction: the store commits the events itself, atomically per call
    sqlite,    // a sqlite3* inside the caller's BEGIN (use BEGIN IMMEDIATE) on the store's file
    postgres,  // a PGconn* inside the caller's BEGIN on the store's database
    redis,     // a redisContext* after the caller's MULTI; the caller sends EXEC
  };

  TxHandle() = default;
  static TxHandle sqlite(sqlite3* db) { return TxHandle(Kind::sqlite, db); }
  static TxHandle postgres(pg_conn* conn) { return TxHandle(Kind::postgres, conn); }
  static TxHandle redis_multi(redisContext* ctx) { return TxHandle(Kind::redis, ctx); }

  Kind kind() const { return kind_; }
  void* native() const { return native_; }
  bool is_none() const { return kind_ == Kind::none; }

 private:
  TxHandle(Kind kind, void* native) : kind_(kind), native_(native) {}
  Kind kind_ = Kind::none;
  void* native_ = nullptr;
};

}  // namespace outpost
