#pragma once
// Wake-ups for Store::wait_for_work on Redis: a SUBSCRIBE to the outbox's wake channel (the
// scripts PUBLISH on emit, retry and release) plus a self-pipe for interrupt().
//
// Thread safety: wait() and interrupt() may be called from any thread; one waiter at a time
// owns the subscription, the others wait for it on a condition variable.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "stores/redis/redis_client.h"

namespace outpost::redis_store {

class WakeListener {
 public:
  // `pattern`: `channel` is a PSUBSCRIBE pattern (the partitions' channels, redis_partition.h).
  WakeListener(Client& client, std::string channel, bool pattern = false);
  ~WakeListener();
  WakeListener(const WakeListener&) = delete;
  WakeListener& operator=(const WakeListener&) = delete;

  // Returns at the deadline, on a message on the channel or on interrupt() (spurious wake-ups
  // are allowed: the caller claims again).
  void wait(std::chrono::steady_clock::time_point deadline);
  void interrupt();

 private:
  bool listen_until(std::chrono::steady_clock::time_point deadline);
  void drain_reader();

  Client& client_;
  const std::string channel_;
  const bool pattern_;
  int wake_read_ = -1, wake_write_ = -1;  // interrupt() pipe

  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t wake_gen_ = 0;    // guarded by mu_
  std::uint64_t interrupts_ = 0;  // guarded by mu_
  bool listening_ = false;        // guarded by mu_: one thread owns sub_ at a time
  Context sub_;                   // used only by the listening thread
  std::uint64_t sub_epoch_ = 0;   // used only by the listening thread: sub_'s master epoch
};

}  // namespace outpost::redis_store
