#include "delivery_thread.h"

namespace outpost::relay_detail {

DeliveryThread::~DeliveryThread() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DeliveryThread::start(Batch& batch) {
  std::lock_guard lock(mu_);
  job_ = &batch;
  done_ = false;
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  cv_.notify_all();
}

void DeliveryThread::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

void DeliveryThread::loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return quit_ || job_ != nullptr; });
    if (!job_) return;  // quit with nothing to do
    Batch* batch = job_;
    lock.unlock();
    deliver_(*batch);
    lock.lock();
    job_ = nullptr;
    done_ = true;
    cv_.notify_all();
    if (quit_) return;
  }
}

}  // namespace outpost::relay_detail
