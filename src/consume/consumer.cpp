// The consumer loop (include/outpost/consumer.h). A batch is first tried in one transaction:
// inbox filter, handler, checkpoint, commit. Messages that fail are then taken one at a time,
// in log order, each attempt in its own transaction after a backoff, until they succeed or are
// parked; only then does the checkpoint move past them. So a crash at any point replays from the
// last commit, and the inbox skips what was committed already.

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "consume/checkpoint_store.h"
#include "consume/decisions.h"
#include "consume/inbox_sql.h"
#include "consume/message.h"
#include "consume/read_ahead.h"
#include "core/names.h"
#include "outpost/error.h"
#include "outpost/inbox.h"
#include "outpost/relay.h"

namespace outpost {

using consume::SqlTx;
using SteadyClock = std::chrono::steady_clock;

namespace {

InboxOptions inbox_options(const CheckpointStore& store, const ConsumerOptions& o) {
  InboxOptions io;
  io.name = store.prefix();
  io.consumer = o.group;
  io.retention = o.inbox_retention;
  return io;
}

const ConsumerOptions& validated(const ConsumerOptions& o) {
  if (o.group.empty() || o.group.size() > 200)
    throw ConfigError("consumer group name must be 1 to 200 bytes");
  if (o.batch_size < 1) throw ConfigError("consumer batch size must be at least 1");
  if (o.max_attempts < 1) throw ConfigError("consumer max_attempts must be at least 1");
  if (o.backoff_max < o.backoff_base)
    throw ConfigError("consumer backoff_max must be >= backoff_base");
  return o;
}

struct GroupMoved {      // an operator moved the group while this consumer ran
  std::string position;  // where it is now
};

}  // namespace

struct Consumer::Impl {
  Impl(Source& s, CheckpointStore& st, CheckpointStore::Impl& sti, const ConsumerOptions& o)
      : source(s),
        store(sti),
        options(validated(o)),
        inbox(inbox_options(st, o)),
        dest(options.backoff_max) {}

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
  void notice(const std::string& m, bool warning) {
    if (!options.on_notice) return;
    try {
      options.on_notice("group '" + options.group + "': " + m, warning);
    } catch (...) {  // must not throw; a logging failure must not stop consuming
    }
  }

  // ---- the destination's pause (docs/consumers.md, "Failure classes") ----------------------
  // A message found the destination down or busy: pause (or stay paused). Said once per outage.
  void destination_unavailable(const std::string& why, Duration retry_after) {
    auto began = dest.unavailable(why, retry_after);
    if (!began) return;
    count([](auto& c) {
      ++c.pauses;
      c.paused = true;
    });
    notice(*began, true);
  }

  // The destination answered (handled or refused a message): the pause, if any, ends.
  void destination_answered() {
    auto ended = dest.answered();
    if (!ended) return;
    count([](auto& c) { c.paused = false; });
    notice(*ended, false);
  }

  // While the destination is down: waits out the probe backoff. False when stopping. With
  // until_idle, a pause that outlasts it ends run() with the outage (UnavailableError).
  bool wait_probe() {
    Duration wait = dest.wait();
    if (const Duration idle = options.until_idle; idle.count() > 0) {
      auto left = std::chrono::duration_cast<Duration>(idle - (SteadyClock::now() - last_progress));
      if (left.count() <= 0)
        throw UnavailableError("the destination has been unavailable for longer than until_idle (" +
                                   std::to_string(idle.count()) + " ms): " + dest.why(),
                               Duration{0}, "destination");
      wait = std::min(wait, left);
    }
    if (!pause(wait)) return false;
    dest.count_probe();
    return true;
  }
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
  void save(const SqlTx& tx, const std::string& position) {
    std::string value = position;
    if (source.partitioned()) {
      auto stored = store.load(tx, options.group);
      value = source.merge(stored ? stored->position : std::string(), position);
    }
    if (!gen) {  // no checkpoint when loaded: the first commit creates it (or another member did)
      store.save(tx, options.group, source.url(), value);
      auto now = store.load(tx, options.group);
      gen_committing = now ? now->gen : 0;
      return;
    }
    if (store.save_at(tx, options.group, source.url(), value, *gen)) return;
    auto now = store.load(tx, options.group);
    if (!now) throw deleted();
    throw GroupMoved{now->position};
  }

  Error deleted() const {  // not retryable: the consumer stops (`outpost consume`: exit 1)
    return Error(ErrorCode::not_found, "consumer",
                 "consumer group '" + options.group +
                     "' was deleted while this consumer ran (`outpost consumers delete`); "
                     "nothing of the batch in flight was committed");
  }

  // Said once per move; the caller loads the group again.
  void moved(const std::string& position) {
    loaded = false;
    if (options.on_moved) options.on_moved(position);
    notice("moved by an operator (`outpost consumers seek`) to " +
               (position.empty() ? std::string("the beginning") : position) +
               "; a batch in flight was rolled back; reading on from there",
           true);
  }

  // The source learns what committed; while a read runs ahead, after that read (ReadAhead).
  void committed(const std::string& position) {
    if (gen_committing) gen = std::exchange(gen_committing, std::nullopt);
    if (ahead)
      ahead->committed(options.group, position);
    else
      source.committed(options.group, position);
  }

  void commit(const SqlTx&) {
    if (options.before_commit) options.before_commit();
    store.conn->commit();
  }

  void load() {
    auto cp = store.in_tx([&](SqlTx& tx) { return store.load(tx, options.group); });
    if (cp && !source.same_log(cp->source))
      throw ConfigError("consumer group '" + options.group + "' reads '" + cp->source + "', not '" +
                        source.url() + "' (use another group name for another log)");
    if (options.on_notice)
      source.set_notice(
          [notice = options.on_notice, group = options.group](const std::string& m, bool warning) {
            notice("group '" + group + "': " + m, warning);
          });
    source.seek(cp ? cp->position : std::string());
    gen = cp ? std::optional<std::int64_t>(cp->gen) : std::nullopt;
    gen_committing.reset();
    source.set_checkpoint_reader([this] {
      auto now = store.in_tx([&](SqlTx& tx) { return store.load(tx, options.group); });
      return now ? now->position : std::string();
    });
    loaded = true;
  }

  void purge_if_due() {
    if (options.inbox_retention.count() <= 0 || SteadyClock::now() < next_purge) return;
    store.in_tx([&](SqlTx& tx) { consume::inbox_purge(inbox, tx, options.inbox_retention); });
    next_purge = SteadyClock::now() + std::chrono::minutes(10);
  }

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

  void note(const TxOutcome& r) {
    if (r.unavailable) {
      destination_unavailable(r.why, r.retry_after);
    } else if (r.answered) {
      last_progress = SteadyClock::now();  // for until_idle: the destination answers again
      destination_answered();
    }
  }

  // Parks msgs[i] in `tx` (its id stays recorded in the inbox, so a duplicate is skipped).
  void park(const SqlTx& tx, const Message& m, int attempts, const std::string& error) {
    store.park(tx, options.group, m, attempts, error);
    if (!m.event.id.is_nil())
      consume::inbox_record_new(inbox, tx, std::span<const EventId>(&m.event.id, 1));
    if (options.ordered && !m.event.key.empty()) held.insert(m.event.key);
    count([](auto& c) { ++c.parked; });
  }

  // One transaction over msgs[idx...]: inbox filter, parking what cannot be handled, the
  // handler, failure bookkeeping (decided in decisions.cpp), and the checkpoint when nothing is
  // left to retry.
  TxOutcome attempt(const std::vector<Message>& msgs, const std::vector<std::size_t>& idx,
                    std::vector<int>& attempts, const ConsumerHandler& handler,
                    const std::string& checkpoint) {
    TxOutcome out;
    SqlTx tx = store.begin();
    try {
      if (options.ordered) held = store.parked_keys(tx, options.group);
      auto ids = consume::inbox_ids(msgs, idx);
      auto fresh = consume::inbox_record_new(inbox, tx, ids.ids);
      auto sorted = consume::sort_out(msgs, idx, ids, fresh, options.ordered, held);
      for (const auto& [i, why] : sorted.park) park(tx, msgs[i], attempts[i], why);
      count([&](auto& c) { c.duplicates += sorted.duplicates.size(); });

      const auto& work = sorted.work;
      consume::Judgement verdict;
      if (!work.empty() || !sorted.duplicates.empty()) {
        std::vector<Message> copy;
        std::span<const Message> view(msgs);
        if (work.size() != msgs.size()) {
          for (std::size_t i : work) copy.push_back(msgs[i]);
          view = copy;
        }
        int tries = 1;
        for (std::size_t i : work) tries = std::max(tries, attempts[i] + 1);
        ConsumerBatch batch(view, tx.handle(), tries, sorted.duplicates.size());
        try {
          handler(batch);
        } catch (const UnavailableError& e) {
          out.threw = out.unavailable = true;
          out.error = out.why = e.what();
          out.retry_after = e.retry_after();
        } catch (const std::exception& e) {
          out.threw = out.answered = true;
          out.error = e.what();
        } catch (...) {
          out.threw = out.answered = true;
          out.error = "unknown exception";
        }
        if (out.threw) {
          store.conn->rollback();
          if (out.unavailable) count([&](auto& c) { c.unavailable += work.size(); });
          return out;
        }
        verdict = consume::judge(msgs, work, batch.failures(), batch.unavailable(), attempts,
                                 options.max_attempts);
      }
      out.unavailable = !verdict.down.empty();
      out.why = verdict.why;
      out.retry_after = verdict.retry_after;
      out.answered = verdict.answered;
      out.retry = verdict.retry;
      for (const auto& f : verdict.failed) {
        count([](auto& c) { ++c.failures; });
        report("group '" + options.group + "': message at " + msgs[f.index].position + " (event " +
               msgs[f.index].event.id.str() + ") failed, attempt " + std::to_string(f.attempt) +
               ": " + f.why);
      }
      for (const auto& [i, why] : verdict.park) park(tx, msgs[i], attempts[i], why);
      consume::inbox_forget(inbox, tx, verdict.forget);
      if (out.retry.empty()) save(tx, checkpoint);
      commit(tx);
      count([&](auto& c) {
        c.handled += verdict.handled;
        c.unavailable += verdict.down.size();
        ++c.batches;
      });
    } catch (...) {
      store.conn->rollback();
      throw;
    }
    if (out.retry.empty()) committed(checkpoint);
    return out;
  }

  // Handles msgs[i] alone until it commits or is parked. False when stop() interrupted it.
  bool settle_one(const std::vector<Message>& msgs, std::size_t i, std::vector<int>& attempts,
                  const ConsumerHandler& handler) {
    for (;;) {
      if (dest.down()) {
        if (!wait_probe()) return false;  // this message is the probe
      } else if (attempts[i] > 0 && !pause(backoff(attempts[i]))) {
        return false;
      }
      if (stop_requested()) return false;
      auto r = attempt(msgs, {i}, attempts, handler, msgs[i].position);
      note(r);
      if (r.unavailable) continue;  // no attempt counted
      if (!r.threw) {
        if (r.retry.empty()) return true;
        continue;
      }
      ++attempts[i];
      count([](auto& c) { ++c.failures; });
      report("group '" + options.group + "': message at " + msgs[i].position + " failed, attempt " +
             std::to_string(attempts[i]) + ": " + r.error);
      if (attempts[i] >= options.max_attempts) {
        store.in_tx([&](SqlTx& tx) {
          park(tx, msgs[i], attempts[i], r.error);
          save(tx, msgs[i].position);
        });
        committed(msgs[i].position);
        return true;
      }
    }
  }

  void process(std::vector<Message>& msgs, const ConsumerHandler& handler) {
    std::vector<int> attempts(msgs.size(), 0);
    std::vector<std::size_t> all(msgs.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    const std::string end = msgs.back().position;
    auto first = attempt(msgs, all, attempts, handler, end);
    note(first);
    if (!first.threw && first.retry.empty()) return;
    if (first.threw && !first.unavailable)
      report("group '" + options.group + "': batch of " + std::to_string(msgs.size()) +
             " failed (" + first.error + "); handling its messages one by one");
    // After a throw nothing of the batch committed: every message goes again, one at a time.
    const auto& pending = first.threw ? all : first.retry;
    for (std::size_t i : pending)
      if (!settle_one(msgs, i, attempts, handler)) return;  // stopping: replayed next run
    store.in_tx([&](SqlTx& tx) { save(tx, end); });
    committed(end);
  }

  // Dead letters an operator asked to retry, in row order, before new messages.
  // False, having retried nothing, when an operator moved the group since it was loaded (the
  // caller loads it again); deleted() when it was deleted. In the transaction that looks for
  // retries, so an idle consumer notices too, at no extra cost.
  bool handle_retries(const ConsumerHandler& handler) {
    std::optional<CheckpointStore::Impl::Checkpoint> now;
    auto rows = store.in_tx([&](SqlTx& tx) {
      if (gen) now = store.load(tx, options.group);
      return store.retries(tx, options.group, options.batch_size);
    });
    if (gen) {
      if (!now) throw deleted();
      if (now->gen != *gen) {
        moved(now->position);
        return false;
      }
    }
    std::set<std::string> failed_keys;
    for (const auto& row : rows) {
      std::vector<Message> one{consume::decode_message(row.payload, row.position)};
      const Message& m = one[0];
      if (options.ordered && !m.event.key.empty() && failed_keys.count(m.event.key)) {
        store.in_tx([&](SqlTx& tx) {
          store.repark(tx, row.id, 0,
                       "held behind an earlier parked message of key '" + m.event.key + "'");
        });
        continue;
      }
      for (int tries = 1;; ++tries) {
        if (dest.down() && !wait_probe()) return true;  // the destination is down: this one probes
        std::string error = m.parse_error;
        bool ok = false;
        TxOutcome r;
        SqlTx tx = store.begin();
        try {
          if (error.empty()) {
            ConsumerBatch batch(one, tx.handle(), tries);
            try {
              handler(batch);
              if (!batch.unavailable().empty()) {
                r.unavailable = true;
                r.why = batch.unavailable()[0].why;
                r.retry_after = batch.unavailable()[0].retry_after;
              } else if (!batch.failures().empty()) {
                error = batch.failures()[0].second;
              }
            } catch (const UnavailableError& e) {
              r.unavailable = true;
              r.why = e.what();
              r.retry_after = e.retry_after();
            } catch (const std::exception& e) {
              error = e.what();
            }
            r.answered = !r.unavailable;
          }
          if (error.empty() && !r.unavailable) {
            store.remove_dead(tx, row.id);
            commit(tx);
            ok = true;
          } else {
            store.conn->rollback();
          }
        } catch (...) {
          store.conn->rollback();
          throw;
        }
        note(r);
        if (r.unavailable) {  // not an attempt: the same try again after the pause
          count([](auto& c) { ++c.unavailable; });
          --tries;
          continue;
        }
        if (ok) {
          count([](auto& c) { ++c.retried, ++c.handled; });
          break;
        }
        count([](auto& c) { ++c.failures; });
        if (tries >= options.max_attempts) {
          store.in_tx([&](SqlTx& t) { store.repark(t, row.id, tries, error); });
          if (!m.event.key.empty()) failed_keys.insert(m.event.key);
          break;
        }
        if (!pause(backoff(tries))) return true;
      }
    }
    return true;
  }

  std::size_t handle(std::vector<Message>& msgs, const ConsumerHandler& handler) {
    if (msgs.empty()) return 0;
    count([&](auto& c) { c.read += msgs.size(); });
    try {
      process(msgs, handler);
    } catch (const GroupMoved& m) {
      moved(m.position);  // nothing of the batch committed: read on from where the group is now
    } catch (...) {
      // The source has read past what committed: seek back to the checkpoint before reading
      // on, or a later run()/run_once() of this Consumer would skip the rest of the batch.
      loaded = false;
      throw;
    }
    return msgs.size();
  }

  std::size_t run_once(const ConsumerHandler& handler) {
    if (!loaded) load();
    purge_if_due();
    if (!handle_retries(handler)) load();  // moved: read from where the group is now
    auto msgs = source.read(options.batch_size, options.poll);
    return handle(msgs, handler);
  }

  // run_once with the read on ahead's thread: the next batch is read while this one commits.
  // The store work before the batch (purge, retries) overlaps its read too.
  std::size_t run_once_ahead(const ConsumerHandler& handler, consume::ReadAhead& reader) {
    if (!loaded) {
      reader.quiesce();  // seek() only with no read in flight
      load();
    }
    if (!reader.in_flight()) reader.request(options.batch_size, options.poll);
    purge_if_due();
    if (!handle_retries(handler)) {  // moved: drop what was read ahead, read from there
      reader.quiesce();
      load();
      reader.request(options.batch_size, options.poll);
    }
    auto msgs = reader.take();
    if (!msgs.empty() && !stop_requested()) reader.request(options.batch_size, options.poll);
    return handle(msgs, handler);
  }
};

Consumer::Consumer(Source& source, CheckpointStore& store, ConsumerOptions options)
    : impl_(std::make_unique<Impl>(source, store, *store.impl_, options)) {}
Consumer::~Consumer() = default;

std::size_t Consumer::run_once(const ConsumerHandler& handler) {
  return impl_->run_once(handler);
}

void Consumer::run(const ConsumerHandler& handler) {
  std::optional<consume::ReadAhead> ahead;
  if (impl_->source.can_read_ahead()) ahead.emplace(impl_->source);
  impl_->ahead = ahead ? &*ahead : nullptr;
  // However run() ends: no read left in flight, queued committed() delivered, and a batch read
  // ahead but not handled dropped, so the next run re-seeks to the checkpoint.
  struct Settle {
    Impl& impl;
    std::optional<consume::ReadAhead>& ahead;
    ~Settle() {
      if (ahead && ahead->quiesce()) impl.loaded = false;
      impl.ahead = nullptr;
    }
  } settle{*impl_, ahead};
  auto& last_message = impl_->last_progress;
  last_message = SteadyClock::now();
  int errors_in_a_row = 0;
  SteadyClock::time_point failing_since{};
  while (!impl_->stop_requested()) {
    try {
      std::size_t n = ahead ? impl_->run_once_ahead(handler, *ahead) : impl_->run_once(handler);
      if (errors_in_a_row > 0) {
        char took[32];
        std::snprintf(took, sizeof took, "%.1f",
                      std::chrono::duration<double>(SteadyClock::now() - failing_since).count());
        impl_->notice("the log and the checkpoint store work again after " + std::string(took) +
                          " s (" + std::to_string(errors_in_a_row) + " failed tries)",
                      false);
      }
      errors_in_a_row = 0;
      if (n > 0) {
        last_message = SteadyClock::now();
      } else if (impl_->options.until_idle.count() > 0 &&
                 SteadyClock::now() - last_message >= impl_->options.until_idle) {
        return;
      }
    } catch (const Error& e) {
      if (!e.retryable()) throw;
      const bool destination = dynamic_cast<const UnavailableError*>(&e) != nullptr;
      // Source or store outage (a lost connection, a full disk, a lock held too long): back off
      // and try again (the batch replays from the checkpoint), never fatal.
      impl_->count([](auto& c) { ++c.errors; });
      Duration delay = backoff_delay(++errors_in_a_row, Duration(100), Duration(5000));
      // until_idle counts time without a message, failed attempts included: an outage (an
      // unreachable source or store, a destination that stays down) that outlasts it ends run()
      // with its error instead of retrying forever; a shorter one is survived as before.
      if (const Duration idle = impl_->options.until_idle; idle.count() > 0) {
        auto left =
            std::chrono::duration_cast<Duration>(idle - (SteadyClock::now() - last_message));
        if (left.count() <= 0) throw;
        delay = std::min(delay, left);
      }
      if (errors_in_a_row == 1 && !destination) {
        failing_since = SteadyClock::now();
        impl_->notice(std::string(e.what()) +
                          ": retrying with backoff (up to 5 s apart) until it works; the batch "
                          "in flight is read again",
                      true);
      }
      impl_->report("group '" + impl_->options.group + "': " + e.what() + " (retrying)");
      if (ahead) ahead->quiesce();  // a batch read ahead is read again after the re-seek
      impl_->loaded = false;
      if (!impl_->pause(delay)) return;
    }
  }
}

void Consumer::stop() {
  std::lock_guard lock(impl_->mu);
  impl_->stopping = true;
  impl_->wake.notify_all();
}

ConsumerCounters Consumer::counters() const {
  std::lock_guard lock(impl_->mu);
  return impl_->counters;
}

}  // namespace outpost
