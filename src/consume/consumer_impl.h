#pragma once
// The consumer's state and steps (include/outpost/consumer.h), shared by consumer.cpp (the
// group's checkpoint and generation, the destination's pause, run()) and consumer_batch.cpp (a
// batch's transactions, one message at a time, operator retries). Private to src/consume/.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "consume/checkpoint_store.h"
#include "consume/decisions.h"
#include "consume/message.h"
#include "consume/read_ahead.h"
#include "outpost/consumer.h"
#include "outpost/error.h"
#include "outpost/inbox.h"
#include "outpost/relay.h"

namespace outpost {
namespace consume {

struct GroupMoved {      // an operator moved the group while this consumer ran
  std::string position;  // where it is now
};

}  // namespace consume

struct Consumer::Impl {
  using SqlTx = consume::SqlTx;
  using SteadyClock = std::chrono::steady_clock;
  Impl(Source& s, CheckpointStore& st, CheckpointStore::Impl& sti, const ConsumerOptions& o);

  Source& source;
  CheckpointStore::Impl& store;
  const ConsumerOptions options;
  const Inbox inbox;

  std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;      // guarded by mu
  ConsumerCounters counters;  // guarded by mu
  bool loaded = false;
  // The group's generation when loaded (nullopt: it had no checkpoint yet), and the one the
  // first commit found, taken over once that commit is through (committed()).
  std::optional<std::int64_t> gen, gen_committing;
  SteadyClock::time_point next_purge{};
  std::set<std::string> held;           // keys with a parked message (ordered mode)
  consume::ReadAhead* ahead = nullptr;  // set while run() reads ahead
  // When messages last came (run() sets it): with until_idle, an outage that lasts longer since
  // then ends run().
  SteadyClock::time_point last_progress = SteadyClock::now();

  // The destination's pause (consumer thread only; counters.paused mirrors down()).
  consume::DestinationPause dest;

  template <class F>
  void count(F&& f) {
    std::lock_guard lock(mu);
    f(counters);
  }
  bool stop_requested() {
    std::lock_guard lock(mu);
    return stopping;
  }
  void report(const std::string& m) {
    if (options.on_error) options.on_error(m);
  }
  void notice(const std::string& m, bool warning);
  // The source's notices (a file log rotated or truncated) come on the thread that reads, the
  // read-ahead's worker too: queued here, they are said on the consumer's thread by
  // flush_source_notices(), so on_notice always runs there (a host names the pipeline by its
  // thread: apps/outpost/log.h). Shared with the source's callback, which may outlive a run().
  struct SourceNotices {
    std::mutex mu;
    std::vector<std::pair<std::string, bool>> queued;
  };
  std::shared_ptr<SourceNotices> source_notices = std::make_shared<SourceNotices>();
  void flush_source_notices() noexcept;

  // ---- the destination's pause (docs/consumers.md, "Failure classes") ----------------------
  // A message found the destination down or busy: pause (or stay paused). Said once per outage.
  void destination_unavailable(const std::string& why, Duration retry_after);

  // The destination answered (handled or refused a message): the pause, if any, ends.
  void destination_answered();

  // While the destination is down: waits out the probe backoff. False when stopping. With
  // until_idle, a pause that outlasts it ends run() with the outage (UnavailableError).
  bool wait_probe();
  // Waits `d` unless stop() comes first; false when stopping.
  bool pause(Duration d) {
    std::unique_lock lock(mu);
    wake.wait_for(lock, d, [&] { return stopping; });
    return !stopping;
  }
  Duration backoff(int attempt) {
    return backoff_delay(attempt, options.backoff_base, options.backoff_max);
  }

  // The checkpoint write, merged with the stored one for sources that share a group; only at
  // the generation loaded: after an operator's seek or delete it throws GroupMoved or deleted()
  // and the batch rolls back (docs/consumers.md, "Moving and deleting a group").
  void save(const SqlTx& tx, const std::string& position);
  Error deleted() const;  // not retryable: the consumer stops (`outpost consume`: exit 1)

  // Said once per move; the caller loads the group again.
  void moved(const std::string& position);

  // The source learns what committed; while a read runs ahead, after that read (ReadAhead).
  void committed(const std::string& position);
  void commit(const SqlTx&);
  void load();
  void purge_if_due();

  struct TxOutcome {
    bool threw = false;
    std::string error;               // the handler's exception text when threw
    std::vector<std::size_t> retry;  // indexes to try again
    // The destination was unavailable for some message (or the handler threw UnavailableError):
    // `why`, and the longest Retry-After asked for.
    bool unavailable = false;
    std::string why;
    Duration retry_after{0};
    bool answered = false;  // the destination handled or refused at least one message
  };
  void note(const TxOutcome& r);

  // Parks msgs[i] in `tx` (its id stays recorded in the inbox, so a duplicate is skipped).
  void park(const SqlTx& tx, const Message& m, int attempts, const std::string& error);

  // One transaction over msgs[idx...]: inbox filter, parking what cannot be handled, the
  // handler, failure bookkeeping (decided in decisions.cpp), and the checkpoint when nothing is
  // left to retry.
  TxOutcome attempt(const std::vector<Message>& msgs, const std::vector<std::size_t>& idx,
                    std::vector<int>& attempts, const ConsumerHandler& handler,
                    const std::string& checkpoint);

  // Handles msgs[i] alone until it commits or is parked. False when stop() interrupted it.
  bool settle_one(const std::vector<Message>& msgs, std::size_t i, std::vector<int>& attempts,
                  const ConsumerHandler& handler);
  void process(std::vector<Message>& msgs, const ConsumerHandler& handler);

  // Dead letters an operator asked to retry, in row order, before new messages.
  // False, having retried nothing, when an operator moved the group since it was loaded (the
  // caller loads it again); deleted() when it was deleted. In the transaction that looks for
  // retries, so an idle consumer notices too, at no extra cost.
  bool handle_retries(const ConsumerHandler& handler);
  std::size_t handle(std::vector<Message>& msgs, const ConsumerHandler& handler);
  std::size_t run_once(const ConsumerHandler& handler);

  // run_once with the read on ahead's thread: the next batch is read while this one commits.
  // The store work before the batch (purge, retries) overlaps its read too.
  std::size_t run_once_ahead(const ConsumerHandler& handler, consume::ReadAhead& reader);
};

}  // namespace outpost
