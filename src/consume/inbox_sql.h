#pragma once
// The inbox's statements on a SqlTx. The public Inbox (include/outpost/inbox.h) runs them on a
// caller's TxHandle; the consumer runs them on its checkpoint store's transaction, whose
// statements keep the store's I/O deadline (src/consume/sql.h).

#include <cstddef>
#include <span>
#include <vector>

#include "consume/sql.h"
#include "outpost/inbox.h"

namespace outpost::consume {

// Inbox::record_new, forget and purge (older than `age`; nothing when it is not positive).
std::vector<bool> inbox_record_new(const Inbox& inbox, const SqlTx& tx,
                                   std::span<const EventId> ids);
void inbox_forget(const Inbox& inbox, const SqlTx& tx, std::span<const EventId> ids);
std::size_t inbox_purge(const Inbox& inbox, const SqlTx& tx, Duration age);

}  // namespace outpost::consume
