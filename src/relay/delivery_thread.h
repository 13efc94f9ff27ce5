#pragma once
// The relay's delivery thread (pipelining, docs/relay.md): runs the sink on one batch while the
// relay thread settles the previous batch and claims the next. One job at a time; the thread is
// started by the first job and joined by the destructor.
//
// Thread safety: start/wait from the relay thread only.

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "batch.h"

namespace outpost::relay_detail {

class DeliveryThread {
 public:
  // `deliver` runs on the delivery thread, one batch at a time; it must not throw.
  explicit DeliveryThread(std::function<void(Batch&)> deliver) : deliver_(std::move(deliver)) {}
  ~DeliveryThread();
  DeliveryThread(const DeliveryThread&) = delete;
  DeliveryThread& operator=(const DeliveryThread&) = delete;

  // Hands `batch` over (it must stay alive until wait() returned).
  void start(Batch& batch);
  // Waits until the batch handed over last is delivered.
  void wait();

 private:
  void loop();

  const std::function<void(Batch&)> deliver_;
  std::mutex mu_;
  std::condition_variable cv_;
  Batch* job_ = nullptr;  // guarded by mu_
  bool done_ = true;      // guarded by mu_
  bool quit_ = false;     // guarded by mu_
  std::thread thread_;
};

}  // namespace outpost::relay_detail
