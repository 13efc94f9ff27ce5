// A batch's transactions (include/outpost/consumer.h, docs/consumers.md): the whole batch in one
// transaction first (attempt), then each message that failed alone after a backoff until it
// commits or is parked (settle_one), and the dead letters an operator asked to retry.

#include <algorithm>
#include <span>
#include <string>
#include <utility>

#include "consume/consumer_impl.h"
#include "consume/inbox_sql.h"
#include "core/names.h"

namespace outpost {

using consume::GroupMoved;
using consume::SqlTx;

void Consumer::Impl::note(const TxOutcome& r) {
  if (r.unavailable) {
    destination_unavailable(r.why, r.retry_after);
  } else if (r.answered) {
    last_progress = SteadyClock::now();  // for until_idle: the destination answers again
    destination_answered();
  }
}

void Consumer::Impl::park(const SqlTx& tx, const Message& m, int attempts,
                          const std::string& error) {
  store.park(tx, options.group, m, attempts, error);
  if (!m.event.id.is_nil())
    consume::inbox_record_new(inbox, tx, std::span<const EventId>(&m.event.id, 1));
  if (options.ordered && !m.event.key.empty()) held.insert(m.event.key);
  count([](auto& c) { ++c.parked; });
}

Consumer::Impl::TxOutcome Consumer::Impl::attempt(const std::vector<Message>& msgs,
                                                  const std::vector<std::size_t>& idx,
                                                  std::vector<int>& attempts,
                                                  const ConsumerHandler& handler,
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

bool Consumer::Impl::settle_one(const std::vector<Message>& msgs, std::size_t i,
                                std::vector<int>& attempts, const ConsumerHandler& handler) {
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

void Consumer::Impl::process(std::vector<Message>& msgs, const ConsumerHandler& handler) {
  std::vector<int> attempts(msgs.size(), 0);
  std::vector<std::size_t> all(msgs.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::string end = msgs.back().position;
  auto first = attempt(msgs, all, attempts, handler, end);
  note(first);
  if (!first.threw && first.retry.empty()) return;
  if (first.threw && !first.unavailable)
    report("group '" + options.group + "': batch of " + std::to_string(msgs.size()) + " failed (" +
           first.error + "); handling its messages one by one");
  // After a throw nothing of the batch committed: every message goes again, one at a time.
  const auto& pending = first.threw ? all : first.retry;
  for (std::size_t i : pending)
    if (!settle_one(msgs, i, attempts, handler)) return;  // stopping: replayed next run
  store.in_tx([&](SqlTx& tx) { save(tx, end); });
  committed(end);
}

bool Consumer::Impl::handle_retries(const ConsumerHandler& handler) {
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

std::size_t Consumer::Impl::handle(std::vector<Message>& msgs, const ConsumerHandler& handler) {
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

}  // namespace outpost
