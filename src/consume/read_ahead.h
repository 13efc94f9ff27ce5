#pragma once
// Reads a source's next batch on a second thread while the consumer commits the current one, so
// a batch costs max(read, commit) instead of read + commit. Only for sources whose
// can_read_ahead() is true (Source in include/outpost/consumer.h says what that promises).
//
// The source is never used by two threads at once: every call on it (read, committed, or the
// caller's own after quiesce()) happens either on the worker between request() and take(), or
// when no read is in flight. committed() notifications that arrive while a read is in flight are
// queued (only the newest position per group: positions only move forward) and delivered by the
// worker before its next read, or by quiesce(); so a source's mirror of the checkpoint (Redis
// Streams' registry) can lag the store by one batch, never run ahead of it.
//
// Thread safety: one owner thread calls every method; the worker is internal.

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "outpost/consumer.h"

namespace outpost::consume {

class ReadAhead {
 public:
  explicit ReadAhead(Source& source);
  // Waits for a read in flight (at most its `wait`), drops its messages, delivers queued
  // committed() notifications. Never throws.
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // True between request() and take().
  bool in_flight() const { return requested_; }
  // Starts source.read(max, wait) on the worker. Precondition: !in_flight().
  void request(std::size_t max, Duration wait);
  // Waits for the read request() started: its messages, or rethrows what read() threw.
  std::vector<Message> take();
  // source.committed(group, position), now when no read is in flight, else before the next read.
  void committed(const std::string& group, const std::string& position);
  // Waits for a read in flight and drops its messages (the caller re-seeks the source), then
  // delivers queued committed() notifications. Afterwards the caller may use the source itself
  // until the next request(). Returns true when messages (or an error) were dropped.
  bool quiesce();

 private:
  void loop();
  void deliver_committed();  // with mu_ held; the worker is not reading

  Source& source_;
  bool requested_ = false;  // owner thread only

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_:
  bool quit_ = false;
  bool pending_ = false;  // a read was asked for and has not started yet
  bool busy_ = false;     // the worker is inside source.read()
  bool done_ = false;     // result_ / error_ hold the outcome of the last read
  std::size_t max_ = 0;
  Duration wait_{0};
  std::vector<Message> result_;
  std::exception_ptr error_;
  std::map<std::string, std::string> committed_;  // group -> newest committed position

  std::thread worker_;  // last: started after every member above exists
};

}  // namespace outpost::consume
