// The store's file removed or replaced underneath (sqlite_file_check.h, docs/sqlite.md).

#include "stores/sqlite/sqlite_file_check.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>

#include "outpost/error.h"

namespace outpost::sqlite_store {
namespace {

constexpr std::int64_t kInterval = std::chrono::nanoseconds(std::chrono::seconds(1)).count();

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string identity(dev_t dev, ino_t ino) {
  return "device " + std::to_string(static_cast<unsigned long long>(dev)) + ", inode " +
         std::to_string(static_cast<unsigned long long>(ino));
}

}  // namespace

void FileCheck::start(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // not a file the path reaches: nothing to compare
  std::lock_guard l(mu_);
  path_ = path;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  next_ns_ = now_ns() + kInterval;
}

void FileCheck::check() {
  const std::int64_t t = now_ns();
  if (t < next_ns_.load(std::memory_order_relaxed)) return;
  std::lock_guard l(mu_);
  if (failure_.empty()) {
    if (t < next_ns_.load()) return;  // another thread looked meanwhile
    next_ns_ = t + kInterval;
    struct stat st {};
    const int rc = ::stat(path_.c_str(), &st);
    if (rc == 0 && st.st_dev == dev_ && st.st_ino == ino_) return;
    if (rc != 0 && errno != ENOENT && errno != ENOTDIR) return;  // cannot tell (EACCES, EIO)
    const std::string what =
        rc != 0 ? "was removed"
                : "was replaced by another file (" + identity(st.st_dev, st.st_ino) + ")";
    failure_ = "the database file '" + path_ + "' " + what + " while this store had it open (" +
               identity(dev_, ino_) +
               "): the store would go on reading the old file, and events written at the path "
               "would never be read. Restart the relay to open the file at the path (in `outpost "
               "run` a SIGHUP restarts the stopped pipeline; docs/sqlite.md, \"A file removed or "
               "replaced underneath\")";
    next_ns_ = 0;  // every call throws from now on
  }
  throw Error(ErrorCode::corrupt, "sqlite", failure_);
}

}  // namespace outpost::sqlite_store
