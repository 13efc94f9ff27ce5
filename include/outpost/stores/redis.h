#pragma once
// The Redis store: `redis://[:password@]host:port[,host:port...]/db?prefix=outbox`, or through
// Redis Sentinel: `redis-sentinel://[:password@]host:port[,host:port...]/MASTER?prefix=outbox`.
//
// Layout: every key of one outbox starts with the hash tag `{prefix}:` so all of them live in
// one Redis Cluster slot and every Lua script touches one node. A hash per event, sorted sets
// for pending (scored by due time, ms), leased (scored by lease expiry), dead (by sequence) and
// live (by sequence), one sorted set per non-empty event key (ordered mode), an INCR sequence.
// Every state change is one Lua script (EVALSHA, reloaded after NOSCRIPT); time comes from the
// server's TIME, never from the relay's clock.
//
// Single writer: claim() takes a writer lease on `{prefix}:lock` (SET NX PX writer_lease_ms with
// this Store's owner token); from then on a thread of the Store renews it every third of
// writer_lease_ms for as long as its relay keeps claiming or renewing within the event lease.
// So a standby takes over within writer_lease_ms of a crash, whatever the event lease, and one
// event lease after a hung relay's last claim or renew; renew() compares-and-renews it too, the
// destructor compares-and-deletes it. Each change of holder increments a fencing token
// (`{prefix}:writer` fence) carried in LeaseToken.fence; ack/nack/release/renew check it, so a
// relay that lost the lease to another one can no longer ack, nack or renew anything.
// Throughput scales with several prefixes (one writer each), spread over cluster masters.
//
// Transactional emit: after the caller's MULTI on their own blocking redisContext,
// append(events, TxHandle::redis_multi(ctx)) queues one EVAL (reply QUEUED); the caller's EXEC
// then writes the events atomically with their own commands, or DISCARD drops them.
// See docs/redis.md for the exact hiredis sequence and the durability settings.
//
// Thread safety: every method may be called from several threads (a small connection pool).

#include <memory>
#include <string_view>

#include "outpost/store.h"

namespace outpost {

// URL parameters:
//   prefix=NAME        key prefix, [A-Za-z0-9_.-]{1,100}, braces optional (default outbox)
//   timeout_ms=N       connect and command timeout (default 5000)
//   writer_lease=BOOL  single-writer lease with fencing across Store objects (default true);
//                      false lets several relays claim disjoint batches at once
//   writer_lease_ms=N  length of the writer lease, 100-3600000 (default 4000): how long a
//                      standby waits after the holder crashed; renewed every N/3 ms
//   partitions=N       1-1024 (default 1): N partitions, each its own key space {prefix:pK} with
//                      its own writer lease, shared among the relays (docs/redis.md, Partitions)
// A URL with several host:port pairs is a Redis Cluster seed list; the master of the prefix's
// slot is found with CLUSTER SLOTS, MOVED/ASK are followed, and a failover is recovered by
// reconnecting and re-resolving. A single host that runs in cluster mode is detected too.
// redis-sentinel://: the hosts are sentinels (default port 26379), the path the master's name;
// the master is asked from them and again after a failover. Parameters as above, plus
//   db=N               database number 0-15 (the path is the master's name)
//   sentinel_password  AUTH at the sentinels (the URL's password is the master's)
std::unique_ptr<Store> open_redis_store(std::string_view url, const StoreOptions& options = {});

}  // namespace outpost
