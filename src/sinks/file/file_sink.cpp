#include "outpost/sinks/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "core/sink_batch.h"
#include "core/url.h"
#include "outpost/error.h"
#include "outpost/json.h"
#include "sinks/file/file_classify.h"

namespace outpost {

namespace file {

Outcome classify(int err) {
  switch (err) {
    case EPIPE:
      return Outcome::closed;
    case ENOSPC:
    case EDQUOT:
    case EIO:
    case EROFS:
    case EFBIG:
    case ENOENT:
    case ENOTDIR:
    case EACCES:
    case EPERM:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
    case ESTALE:
    case ETIMEDOUT:
    case ENXIO:
    case ENODEV:
      return Outcome::unavailable;
    default:
      return Outcome::refused;
  }
}

}  // namespace file

namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Owns a file descriptor; closes it unless it is standard output.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ > STDERR_FILENO) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

class FileSink final : public Sink {
 public:
  explicit FileSink(std::string path) : path_(std::move(path)), stdout_(path_ == "-") {
    if (stdout_) {
      fd_ = Fd(STDOUT_FILENO);
    } else {
      open_or_throw();
    }
  }

  std::string_view name() const override { return "file"; }

  std::string closed() const override {
    std::lock_guard lock(closed_mu_);
    return closed_;
  }

  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    std::vector<DeliveryResult> results(events.size());
    if (events.empty()) return results;
    std::lock_guard lock(mu_);

    buffer_.clear();
    for (const auto& e : events) {
      append_json(buffer_, e);  // the one JSON encoding (outpost/json.h)
      buffer_ += '\n';
    }
    if (auto [err, error] = write_batch(); !error.empty()) {
      DeliveryResult outcome;
      switch (file::classify(err)) {
        case file::Outcome::unavailable:
          outcome = core::unavailable(error);
          break;
        case file::Outcome::refused:
          outcome = core::refused(error);
          break;
        case file::Outcome::closed:  // closed() says so; the relay stops and releases the batch
          outcome = DeliveryResult::failed(error);
          break;
      }
      for (auto& r : results) r = outcome;
    }
    return results;
  }

 private:
  // Opens (creates) path_ for appending; throws with a message naming the path.
  // A named pipe without a reader (ENXIO) is not an error at start: the sink is unavailable
  // until a reader opens it (the relay pauses and probes; docs/configuration.md, "Sink URLs").
  void open_or_throw() {
    if (auto [err, msg] = open_path(); err != 0 && err != ENXIO) {
      if (err == ENOENT || err == ENOTDIR || err == EISDIR || err == EACCES || err == EROFS ||
          err == EPERM)
        throw ConfigError(msg, "file");
      throw ConnectionError("file", msg, std::to_string(err));
    }
  }

  // Opens (creates) path_ for appending: {0, ""}, or the errno and a message naming the path.
  // O_NONBLOCK: opening a named pipe for writing blocks until it has a reader, which would hang
  // the relay's start (and a daemon's start or reload with every other pipeline) for as long as
  // nobody reads; non-blocking, it fails with ENXIO instead. Writes block again once it is open.
  std::pair<int, std::string> open_path() {
    int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd >= 0) {
      int flags = ::fcntl(fd, F_GETFL);
      if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int err = errno;
        ::close(fd);
        return {err, "file sink: cannot open '" + path_ + "': " + errno_text(err)};
      }
    }
    if (fd < 0) {
      int err = errno;
      std::string msg = "file sink: cannot open '" + path_ + "': " + errno_text(err);
      if (err == ENXIO) msg += " (a named pipe that nobody reads yet)";
      struct stat st {};
      std::string dir = parent_dir(path_);
      if (err == ENOENT && ::stat(dir.c_str(), &st) != 0)
        msg += " (directory '" + dir + "' does not exist)";
      return {err, std::move(msg)};
    }
    fd_ = Fd(fd);
    struct stat st {};
    if (::fstat(fd, &st) == 0) {
      dev_ = st.st_dev;
      ino_ = st.st_ino;
    }
    sync_ = worth_syncing(fd);
    tail_checked_ = false;
    return {0, {}};
  }

  // Whether the regular file `st` describes (path_, open) is non-empty and its last byte is
  // not a line end. Read through a descriptor of its own: ours is write-only, and opening a
  // pipe for reading and writing would change what a writer sees when its reader goes away.
  bool ends_torn(const struct stat& st) const {
    if (!S_ISREG(st.st_mode) || st.st_size == 0) return false;
    Fd in(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat same {};
    if (in.get() < 0 || ::fstat(in.get(), &same) != 0 || same.st_ino != st.st_ino ||
        same.st_dev != st.st_dev)
      return false;
    char last = '\n';
    return ::pread(in.get(), &last, 1, st.st_size - 1) == 1 && last != '\n';
  }

  // fdatasync() makes a file or block device durable; a pipe, a socket or a character device
  // (a terminal, /dev/null) has nothing to sync, and fdatasync() fails there with EINVAL after
  // the write went through. When the type cannot be read, sync (an error is then reported).
  static bool worth_syncing(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return true;
    return !(S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode));
  }

  // Reopens when the file was rotated away (renamed, removed) or a previous fsync failed (after
  // a failed fsync the kernel may have dropped the dirty pages; the descriptor cannot be trusted).
  std::pair<int, std::string> ensure_open() {
    if (stdout_) return {0, {}};
    struct stat st {};
    bool rotated = ::stat(path_.c_str(), &st) != 0 || st.st_dev != dev_ || st.st_ino != ino_;
    if (fd_.get() >= 0 && !rotated) return {0, {}};
    fd_.reset();
    return open_path();
  }

  // Writes buffer_ with as many write() calls as it takes, then makes it durable. Returns the
  // errno and error text, {0, ""} on success.
  std::pair<int, std::string> write_batch() {
    if (auto failure = ensure_open(); failure.first != 0) return failure;
    int fd = fd_.get();
    struct stat before {};
    bool have_before = !stdout_ && ::fstat(fd, &before) == 0;
    // A writer killed mid-write (SIGKILL interrupts a long write() at a page boundary) leaves
    // a line without its end. The first batch after opening starts on a line of its own, so the
    // torn fragment stays one line that readers skip instead of swallowing this batch's first
    // event (docs/sinks_file_http.md).
    bool end_torn_line = !tail_checked_ && have_before && ends_torn(before);
    if (end_torn_line) buffer_.insert(buffer_.begin(), '\n');
    std::size_t done = 0;
    while (done < buffer_.size()) {
      ssize_t n = ::write(fd, buffer_.data() + done, buffer_.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        undo_partial(before, have_before, done);
        if (err == EPIPE && !stdout_) {
          // The reader of a named pipe went away: another can open it, so the sink is down, not
          // gone. Reopened on the next batch, which fails with ENXIO (unavailable: the relay
          // pauses and probes) until a reader is there (docs/sinks_file_http.md).
          fd_.reset();
          return {ENXIO, "write '" + path_ + "': the reader of the pipe went away (" +
                             errno_text(err) + "); waiting for a reader to open it"};
        }
        if (err == EPIPE) {  // standard output's reader went away: nothing can reopen it
          std::lock_guard lock(closed_mu_);
          closed_ =
              "write '" + path_ + "': the reader of the pipe went away (" + errno_text(err) + ")";
        }
        return {err, "write '" + path_ + "': " + errno_text(err)};
      }
      done += static_cast<std::size_t>(n);
    }
    tail_checked_ = true;
    // Nothing to sync on a pipe or device (worth_syncing). Standard output is looked at again
    // each batch until it is worth it (it is known only when used).
    if (stdout_ && !sync_) sync_ = worth_syncing(fd);
    if (!sync_) return {0, {}};
    while (::fdatasync(fd) != 0) {
      if (errno == EINTR) continue;
      int err = errno;
      if (!stdout_) fd_.reset();  // reopen before the next batch
      return {err, "fdatasync '" + path_ + "': " + errno_text(err)};
    }
    return {0, {}};
  }

  // After a partial write (ENOSPC, EIO) cut the torn tail off again so the file stays valid
  // JSON lines — but only when the file grew by exactly what we wrote, i.e. nobody else
  // appended meanwhile (several relays may share one file).
  void undo_partial(const struct stat& before, bool have_before, std::size_t written) {
    if (!have_before || written == 0) return;
    struct stat now {};
    if (::fstat(fd_.get(), &now) != 0) return;
    if (now.st_size == before.st_size + static_cast<off_t>(written)) {
      if (::ftruncate(fd_.get(), before.st_size) != 0) {
        // Nothing more to do: the events are reported failed and will be redelivered; readers
        // skip a line that does not parse.
      }
    }
  }

  const std::string path_;
  const bool stdout_;
  std::mutex mu_;  // serialises deliver(); guards everything below
  Fd fd_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool sync_ = false;          // fdatasync() after each batch (worth_syncing)
  bool tail_checked_ = false;  // the file's end was looked at since it was opened (ends_torn)
  std::string buffer_;         // reused across batches
  mutable std::mutex closed_mu_;
  std::string closed_;  // guarded by closed_mu_: why the destination is gone for good
};

}  // namespace

namespace {
// The path of a file: URL (file:PATH, file:///PATH, file://localhost/PATH); throws ConfigError.
std::string file_sink_path(std::string_view url) {
  auto u = core::Url::parse(url);
  if (u.scheme() != "file")
    throw ConfigError("bad URL '" + u.redacted() + "': scheme '" + u.scheme() + "' is not file:");
  std::string path = u.local_path();
  if (path.empty() || path == "/")
    throw ConfigError("bad URL '" + u.redacted() + "': file: needs a path, e.g. file:out.jsonl");
  u.reject_unknown();
  return path;
}
}  // namespace

std::unique_ptr<Sink> open_file_sink(std::string_view url, const SinkOptions& /*options*/) {
  return std::make_unique<FileSink>(file_sink_path(url));
}

void check_file_sink_url(std::string_view url) {
  std::string path = file_sink_path(url);
  if (path == "-") return;
  // Worded as open_or_throw() words the same failure, so `check` and `run` say one thing.
  std::string dir = parent_dir(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT)
      throw ConfigError("file sink: cannot open '" + path + "': " + errno_text(ENOENT) +
                            " (directory '" + dir + "' does not exist)",
                        "file");
    return;  // anything else is for the open to find and word
  }
  if (!S_ISDIR(st.st_mode))
    throw ConfigError("file sink: cannot open '" + path + "': " + errno_text(ENOTDIR), "file");
}

}  // namespace outpost
