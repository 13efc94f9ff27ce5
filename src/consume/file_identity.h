// A file of the log the file sink writes: its identity (device, inode, birth time, fingerprint
// of the first line), the checkpoint position that names it (`OFFSET@DEV:INO:BIRTH:FP`), and
// finding it again in the log's directory after rotation (docs/consumers.md, "Log rotation").
// The reader is file_source.cpp.

#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outpost::consume::file_log {

// pread() that retries when interrupted.
ssize_t pread_full(int fd, char* buf, std::size_t n, std::int64_t at);

// The fingerprint of the file's first line (with its '\n'), or of its first 1 KiB when that line
// is longer; none while the file has neither.
std::optional<std::uint64_t> fingerprint(int fd);

struct Identity {
  dev_t dev = 0;
  ino_t ino = 0;
  std::int64_t birth = 0;           // ns since the epoch; 0: unknown
  std::optional<std::uint64_t> fp;  // none: written before the first line was whole

  // Device and inode: the same file while one of the two is held open.
  bool is(const struct stat& st) const { return st.st_dev == dev && st.st_ino == ino; }
  // The same file also when neither is open (an inode is reused once its file is deleted).
  bool same_file(const Identity& o) const {
    return dev == o.dev && ino == o.ino && (birth == 0 || o.birth == 0 || birth == o.birth);
  }
  std::string text() const {
    char fp_text[17] = "";
    if (fp) std::snprintf(fp_text, sizeof fp_text, "%016llx", static_cast<unsigned long long>(*fp));
    return std::to_string(static_cast<unsigned long long>(dev)) + ":" +
           std::to_string(static_cast<unsigned long long>(ino)) + ":" + std::to_string(birth) +
           ":" + fp_text;
  }
  std::string describe() const {
    return "device " + std::to_string(static_cast<unsigned long long>(dev)) + ", inode " +
           std::to_string(static_cast<unsigned long long>(ino));
  }
};

// A checkpoint position: `OFFSET@DEV:INO:BIRTH:FP`, or a bare `OFFSET` (written before positions
// had the file's identity: the file at the path), or "" (the start).
struct Checkpoint {
  std::int64_t offset = 0;
  std::optional<Identity> id;  // none: "" or a bare offset (the file at the path)
};

// Throws ConfigError naming the position when it is neither form.
Checkpoint parse_position(const std::string& position);

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// One file of the log, open for reading.
struct LogFile {
  Fd fd;
  Identity id;
  std::string name;  // where it was found (the path, or a rotated name such as LOG.1)

  explicit operator bool() const { return static_cast<bool>(fd); }
  // The identity with the fingerprint, once the first line is whole.
  const Identity& identity() {
    if (!id.fp) id.fp = fingerprint(fd.get());
    return id;
  }
};

struct stat fstat_or_throw(int fd, const std::string& name);

// Opens `name`; an empty LogFile when it does not exist or is a directory (nothing to read yet).
LogFile open_log_file(const std::string& name);

// The directory of the log `base` (its file name), where rotation leaves the older files
// (`LOG.1`, `LOG-20260101`).
class LogDirectory {
 public:
  LogDirectory(std::string dir, std::string base) : dir_(std::move(dir)), base_(std::move(base)) {}

  // The file of `id` in the log's directory (a rotated name, or still the path), or none.
  LogFile find_by_identity(const Identity& id) const;

  // A copy of the file whose first line hashes to `fp` with at least `size` bytes, other than
  // `not_this` (logrotate's copytruncate copies the log, then truncates it in place).
  LogFile find_copy(std::uint64_t fp, std::int64_t size, const Identity& not_this) const;

  // The oldest rotated file made after `after` (the log was rotated again while `after` was
  // read), other than the file at the path (`current`) and the files already `read`; none when
  // `after` was the last one. Ordered by birth time and rotation number, not by modification
  // time (a late writer changes that). Compressed files cannot be read and are not considered
  // (docs/consumers.md).
  LogFile next_rotated(LogFile& after, LogFile& current,
                       const std::vector<Identity>& read = {}) const;

 private:
  std::string dir_, base_;
};

}  // namespace outpost::consume::file_log
