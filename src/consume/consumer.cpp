// The consumer loop (include/outpost/consumer.h). A batch is first tried in one transaction:
// inbox filter, handler, checkpoint, commit. Messages that fail are then taken one at a time,
// in log order, each attempt in its own transaction after a backoff, until they succeed or are
// parked; only then does the checkpoint move past them. So a crash at any point replays from the
// last commit, and the inbox skips what was committed already.

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "consume/checkpoint_store.h"
#include "consume/consumer_impl.h"
#include "consume/decisions.h"
#include "consume/inbox_sql.h"
#include "consume/message.h"
#include "consume/read_ahead.h"
#include "core/names.h"
#include "core/works_again.h"
#include "outpost/error.h"
#include "outpost/inbox.h"
#include "outpost/relay.h"

namespace outpost {

using consume::GroupMoved;
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

}  // namespace

Consumer::Impl::Impl(Source& s, CheckpointStore& st, CheckpointStore::Impl& sti,
                     const ConsumerOptions& o)
    : source(s),
      store(sti),
      options(validated(o)),
      inbox(inbox_options(st, o)),
      dest(options.backoff_max) {}

void Consumer::Impl::notice(const std::string& m, bool warning) {
  if (!options.on_notice) return;
  try {
    options.on_notice("group '" + options.group + "': " + m, warning);
  } catch (...) {  // must not throw; a logging failure must not stop consuming
  }
}

void Consumer::Impl::flush_source_notices() noexcept {
  std::vector<std::pair<std::string, bool>> said;
  try {
    std::lock_guard lock(source_notices->mu);
    said.swap(source_notices->queued);
  } catch (...) {  // a lock that failed: said with the next flush
    return;
  }
  for (const auto& [m, warning] : said) notice(m, warning);
}

void Consumer::Impl::destination_unavailable(const std::string& why, Duration retry_after) {
  auto began = dest.unavailable(why, retry_after);
  if (!began) return;
  count([](auto& c) {
    ++c.pauses;
    c.paused = true;
  });
  notice(*began, true);
}

void Consumer::Impl::destination_answered() {
  auto ended = dest.answered();
  if (!ended) return;
  count([](auto& c) { c.paused = false; });
  notice(*ended, false);
}

bool Consumer::Impl::wait_probe() {
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

void Consumer::Impl::save(const SqlTx& tx, const std::string& position) {
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

Error Consumer::Impl::deleted() const {
  return Error(ErrorCode::not_found, "consumer",
               "consumer group '" + options.group +
                   "' was deleted while this consumer ran (`outpost consumers delete`); "
                   "nothing of the batch in flight was committed");
}

void Consumer::Impl::moved(const std::string& position) {
  loaded = false;
  if (options.on_moved) options.on_moved(position);
  notice("moved by an operator (`outpost consumers seek`) to " +
             (position.empty() ? std::string("the beginning") : position) +
             "; a batch in flight was rolled back; reading on from there",
         true);
}

void Consumer::Impl::committed(const std::string& position) {
  if (gen_committing) gen = std::exchange(gen_committing, std::nullopt);
  if (ahead)
    ahead->committed(options.group, position);
  else
    source.committed(options.group, position);
}

void Consumer::Impl::commit(const SqlTx&) {
  if (options.before_commit) options.before_commit();
  store.conn->commit();
}

void Consumer::Impl::load() {
  auto cp = store.in_tx([&](SqlTx& tx) { return store.load(tx, options.group); });
  if (cp && !source.same_log(cp->source))
    throw ConfigError("consumer group '" + options.group + "' reads '" + cp->source + "', not '" +
                      source.url() + "' (use another group name for another log)");
  if (options.on_notice)
    source.set_notice([queue = source_notices](const std::string& m, bool warning) {
      std::lock_guard lock(queue->mu);
      queue->queued.emplace_back(m, warning);
    });
  source.set_group(options.group);  // so a source's errors name the group and its way out
  source.seek(cp ? cp->position : std::string());
  flush_source_notices();
  gen = cp ? std::optional<std::int64_t>(cp->gen) : std::nullopt;
  gen_committing.reset();
  source.set_checkpoint_reader([this] {
    auto now = store.in_tx([&](SqlTx& tx) { return store.load(tx, options.group); });
    return now ? now->position : std::string();
  });
  loaded = true;
}

void Consumer::Impl::purge_if_due() {
  if (options.inbox_retention.count() <= 0 || SteadyClock::now() < next_purge) return;
  store.in_tx([&](SqlTx& tx) { consume::inbox_purge(inbox, tx, options.inbox_retention); });
  next_purge = SteadyClock::now() + std::chrono::minutes(10);
}

std::size_t Consumer::Impl::run_once(const ConsumerHandler& handler) {
  if (!loaded) load();
  purge_if_due();
  if (!handle_retries(handler)) load();  // moved: read from where the group is now
  auto msgs = source.read(options.batch_size, options.poll);
  flush_source_notices();
  return handle(msgs, handler);
}

std::size_t Consumer::Impl::run_once_ahead(const ConsumerHandler& handler,
                                           consume::ReadAhead& reader) {
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
  flush_source_notices();  // what the worker's read said
  if (!msgs.empty() && !stop_requested()) reader.request(options.batch_size, options.poll);
  return handle(msgs, handler);
}

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
      impl.flush_source_notices();
    }
  } settle{*impl_, ahead};
  auto& last_message = impl_->last_progress;
  last_message = SteadyClock::now();
  int errors_in_a_row = 0;
  SteadyClock::time_point failing_since{};
  while (!impl_->stop_requested()) {
    impl_->flush_source_notices();  // said by a read that failed (its error is handled below)
    try {
      std::size_t n = ahead ? impl_->run_once_ahead(handler, *ahead) : impl_->run_once(handler);
      if (errors_in_a_row > 0)
        impl_->notice(core::works_again("the log and the checkpoint store work",
                                        SteadyClock::now() - failing_since,
                                        static_cast<std::size_t>(errors_in_a_row), "failed tries"),
                      false);
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
