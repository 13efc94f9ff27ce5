#pragma once
// Whether the store's path still names the file the store opened. A file removed (`rm`) or
// replaced (`mv new.db outbox.db`, a restore) under a running store is still read through the
// open connections, while emitters write a new file at the path that nobody relays: the store
// fails instead, naming the file, so the relay stops and a restart opens the path again
// (docs/sqlite.md, "A file removed or replaced underneath").

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace outpost::sqlite_store {

class FileCheck {
 public:
  // Remembers the file at `path` (the store's canonical path, just opened) as the store's file.
  void start(const std::string& path);
  // Throws Error(ErrorCode::corrupt) naming the file when the path names another file now, or
  // none. Looks at the path at most once a second (one stat()); once it differed, every call
  // throws. Does nothing before start().
  void check();

 private:
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::atomic<std::int64_t> next_ns_{INT64_MAX};  // steady clock: when to look again
  std::mutex mu_;
  std::string failure_;  // guarded by mu_; set once the path named another file
};

}  // namespace outpost::sqlite_store
