#include <signal.h>
#include <time.h>

#include <thread>

#include "cli.h"

namespace outpost::cli {
namespace {

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

void block_stop_signals() {
  sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

struct StopSignalWatcher::Impl {
  std::atomic<bool> done{false};
  std::thread thread;
};

StopSignalWatcher::StopSignalWatcher(std::function<void(int)> on_stop) : impl_(new Impl) {
  impl_->thread = std::thread([this, on_stop = std::move(on_stop)] {
    sigset_t set = stop_signals();
    // A short timeout so the destructor can end the thread without sending itself a signal.
    const timespec tick{0, 50'000'000};
    while (!impl_->done.load()) {
      int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig > 0) {
        received_.store(sig);
        on_stop(sig);
      }
    }
  });
}

StopSignalWatcher::~StopSignalWatcher() {
  impl_->done.store(true);
  impl_->thread.join();
  delete impl_;
}

}  // namespace outpost::cli
