#include "consume/read_ahead.h"

#include <utility>

namespace outpost::consume {

ReadAhead::ReadAhead(Source& source) : source_(source), worker_([this] { loop(); }) {}

ReadAhead::~ReadAhead() {
  quiesce();
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void ReadAhead::request(std::size_t max, Duration wait) {
  {
    std::lock_guard lock(mu_);
    max_ = max;
    wait_ = wait;
    pending_ = true;
    done_ = false;
  }
  requested_ = true;
  cv_.notify_all();
}

std::vector<Message> ReadAhead::take() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  requested_ = false;
  done_ = false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return std::exchange(result_, {});
}

void ReadAhead::committed(const std::string& group, const std::string& position) {
  std::lock_guard lock(mu_);
  committed_[group] = position;
  if (!pending_ && !busy_) deliver_committed();
}

bool ReadAhead::quiesce() {
  std::unique_lock lock(mu_);
  bool dropped = false;
  if (requested_) {
    cv_.wait(lock, [&] { return done_; });
    dropped = !result_.empty() || error_;
    result_.clear();
    error_ = nullptr;
    done_ = false;
    requested_ = false;
  }
  deliver_committed();
  return dropped;
}

void ReadAhead::deliver_committed() {
  for (auto& [group, position] : committed_) {
    try {
      source_.committed(group, position);
    } catch (...) {
      // committed() must not throw; a source that does only loses this registration.
    }
  }
  committed_.clear();
}

void ReadAhead::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return quit_ || pending_; });
    if (quit_) return;
    pending_ = false;
    deliver_committed();  // the batch these positions end has committed: register it first
    busy_ = true;
    const std::size_t max = max_;
    const Duration wait = wait_;
    lock.unlock();
    std::vector<Message> got;
    std::exception_ptr error;
    try {
      got = source_.read(max, wait);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    result_ = std::move(got);
    error_ = error;
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace outpost::consume
