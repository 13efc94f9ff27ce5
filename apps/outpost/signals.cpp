// The process's signal policy (cli.h). SIGPIPE is ignored everywhere. SIGHUP is the daemon's
// reload and a one-pipeline command's stop, like SIGTERM (PipelineHost blocks it and takes it on
// a watcher thread). SIGINT/SIGTERM: blocked
// first thing in main(), so every thread inherits the mask and a
// signal that arrives before a command is ready stays pending instead of killing the process;
// commands that handle them take them on one thread with sigwait(), the others unblock them.

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli.h"

namespace outpost::cli {
namespace {

sigset_t stop_signals(bool hangup = false) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (hangup) sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

void block_stop_signals() {
  sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void set_process_signal_policy() {
  block_stop_signals();
  signal(SIGPIPE, SIG_IGN);
}

void unblock_stop_signals() {
  sigset_t set = stop_signals();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);  // a pending one is acted on now
}

struct StopSignalWatcher::Impl {
  std::atomic<bool> quit{false};
  std::thread thread;
};

StopSignalWatcher::StopSignalWatcher(std::function<void(int, int)> on_stop, bool hangup_stops)
    : impl_(new Impl) {
  impl_->thread = std::thread([this, on_stop = std::move(on_stop), hangup_stops] {
    const sigset_t set = stop_signals(hangup_stops);
    for (int count = 1;; ++count) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0 || impl_->quit.load()) return;
      received_.store(sig);
      on_stop(sig, count);
    }
  });
}

StopSignalWatcher::~StopSignalWatcher() {
  impl_->quit.store(true);
  // Wakes the sigwait(): the signal is blocked in every thread, so only the watcher takes it.
  pthread_kill(impl_->thread.native_handle(), SIGTERM);
  impl_->thread.join();
  delete impl_;
}

void block_hangup() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

HangupWatcher::HangupWatcher(std::function<void()> on_hangup) {
  thread_ = std::thread([this, on_hangup = std::move(on_hangup)] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0 || quit_.load()) return;
      on_hangup();
    }
  });
}

HangupWatcher::~HangupWatcher() {
  quit_.store(true);
  pthread_kill(thread_.native_handle(), SIGHUP);
  thread_.join();
}

void GiveUpDeadline::give_up_after(std::chrono::milliseconds grace,
                                   const std::function<void()>& last_words) {
  std::unique_lock lock(mu_);
  if (cv_.wait_for(lock, grace, [&] { return finished_; })) return;
  // Still holding mu_: a finished() racing with this blocks until the process is gone, so the
  // summary is printed once.
  last_words();
  std::fflush(nullptr);
  std::_Exit(kExitOk);  // no destructors: they would wait for the hung call
}

void GiveUpDeadline::finished() {
  {
    std::lock_guard lock(mu_);
    finished_ = true;
  }
  cv_.notify_all();
}

}  // namespace outpost::cli
