#include "stores/redis/redis_wake.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "outpost/error.h"

namespace outpost::redis_store {

WakeListener::WakeListener(Client& client, std::string channel, bool pattern)
    : client_(client), channel_(std::move(channel)), pattern_(pattern) {
  int fds[2];
  if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
    throw Error(ErrorCode::internal, "redis", "pipe2 failed");
  wake_read_ = fds[0];
  wake_write_ = fds[1];
}

WakeListener::~WakeListener() {
  ::close(wake_read_);
  ::close(wake_write_);
}

void WakeListener::wait(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  const std::uint64_t seen = wake_gen_;
  const std::uint64_t interrupts = interrupts_;
  while (wake_gen_ == seen && interrupts_ == interrupts &&
         std::chrono::steady_clock::now() < deadline) {
    if (listening_) {
      cv_.wait_until(lock, deadline);
      continue;
    }
    listening_ = true;
    lock.unlock();
    bool woke = false;
    try {
      woke = listen_until(deadline);
    } catch (...) {
      lock.lock();
      listening_ = false;
      throw;
    }
    lock.lock();
    listening_ = false;
    if (woke) ++wake_gen_;
    cv_.notify_all();
  }
}

void WakeListener::interrupt() {
  {
    std::lock_guard lock(mu_);
    ++interrupts_;
  }
  char c = 1;
  [[maybe_unused]] auto n = ::write(wake_write_, &c, 1);
  cv_.notify_all();
}

// Waits on the subscription for a wake message, an interrupt() or the deadline. Returns true
// when woken by a message or interrupt. Connection problems end the wait early (spurious
// wake-ups are allowed) after a short pause, so a down server does not spin the relay.
bool WakeListener::listen_until(std::chrono::steady_clock::time_point deadline) {
  // A subscription made before a failover listens on a node that gets no more emits.
  if (!sub_ || sub_->err || sub_epoch_ != client_.master_epoch()) {
    sub_.reset();
    try {
      sub_ = client_.connect_master(&sub_epoch_);
      Reply r(static_cast<redisReply*>(redisCommand(sub_.get(),
                                                    pattern_ ? "PSUBSCRIBE %b" : "SUBSCRIBE %b",
                                                    channel_.data(), channel_.size())));
      if (!r) throw_failure({"SUBSCRIBE", {}, sub_.get()});
    } catch (const Error&) {
      sub_.reset();
      auto pause = std::min<std::chrono::steady_clock::duration>(
          deadline - std::chrono::steady_clock::now(), std::chrono::milliseconds(100));
      if (pause.count() > 0) std::this_thread::sleep_for(pause);
      return false;
    }
  }
  for (;;) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(sub_.get(), &raw) != REDIS_OK) {
      sub_.reset();
      return false;
    }
    if (raw) {
      freeReplyObject(raw);
      drain_reader();
      return true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd fds[2] = {{sub_->fd, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    int rc = ::poll(fds, 2, static_cast<int>(left.count()));
    if (rc < 0) return false;
    if (fds[1].revents & POLLIN) {
      char buf[64];
      while (::read(wake_read_, buf, sizeof buf) > 0) {
      }
      return true;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (redisBufferRead(sub_.get()) != REDIS_OK) {
        sub_.reset();
        return false;
      }
    }
  }
}

void WakeListener::drain_reader() {
  for (;;) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(sub_.get(), &raw) != REDIS_OK || !raw) return;
    freeReplyObject(raw);
  }
}

}  // namespace outpost::redis_store
