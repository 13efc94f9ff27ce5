#pragma once
// The relay's statements with their parameters (claim, ack, nack, release), as the store sends
// them on its session (session.h), alone or as one pipeline.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "outpost/store.h"
#include "stores/postgres/session.h"
#include "stores/postgres/sql.h"

namespace outpost::pg {

class RelayStatements {
 public:
  // `sql` and `member` must outlive this object. `archive`: acks move rows to the archive.
  RelayStatements(const Sql& sql, bool archive, const std::string& member)
      : sql_(sql), archive_(archive), member_(member) {}

  // $1 owner, $2 lease ms, $3 member; ordered and strict: $4 `busy_keys`, the keys of the
  // member's claims in flight (Membership::busy_keys).
  Stmt claim(const std::string& owner, std::size_t max, Duration lease, ClaimOrder order,
             const std::vector<std::string>& busy_keys) const;

  // Settlements; nullopt when none of the ids belongs to the batch (nothing can count).
  std::optional<Stmt> ack(const ClaimedBatch& batch, std::span<const EventId> ids) const;
  std::optional<Stmt> release(const ClaimedBatch& batch, std::span<const EventId> ids) const;
  std::optional<Stmt> nack(const ClaimedBatch& batch, std::span<const Nack> nacks) const;

 private:
  // `sql` with $1 the batch's lease owner, $2 the seqs of `ids` and $3 the member.
  std::optional<Stmt> by_seq(const ClaimedBatch& batch, std::span<const EventId> ids,
                             const char* name, const std::string& sql, const char* what) const;

  const Sql& sql_;
  const bool archive_;
  const std::string& member_;
};

}  // namespace outpost::pg
