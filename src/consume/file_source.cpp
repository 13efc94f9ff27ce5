// The file source (`file:PATH`): reads the JSON lines the file sink appends. The position is the
// byte offset just after the last whole line consumed. A last line without its '\n' is still
// being written (or was torn by a crash and will be cut off by the sink): it is not read until
// its newline is there, and its bytes are never kept, because the writer may replace them.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <thread>

#include "consume/message.h"
#include "consume/sources.h"
#include "core/url.h"
#include "outpost/error.h"

namespace outpost::consume {
namespace {

class FileSource final : public Source {
 public:
  FileSource(std::string path, std::string url) : path_(std::move(path)), url_(std::move(url)) {}
  ~FileSource() override {
    if (fd_ >= 0) ::close(fd_);
  }

  std::string_view name() const override { return "file"; }
  std::string url() const override { return url_; }
  bool can_read_ahead() const override { return true; }

  void seek(const std::string& position) override { offset_ = parse_offset(position); }

  std::vector<Message> read(std::size_t max, Duration wait) override {
    auto deadline = std::chrono::steady_clock::now() + wait;
    for (;;) {
      auto out = read_now(max);
      if (!out.empty() || std::chrono::steady_clock::now() >= deadline) return out;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  std::optional<std::int64_t> lag(const std::string& position) override {
    std::int64_t from = parse_offset(position);
    if (!open()) return 0;
    std::int64_t lines = 0;
    std::string buf(1 << 20, '\0');
    for (std::int64_t at = from;;) {
      ssize_t n = ::pread(fd_, buf.data(), buf.size(), at);
      if (n <= 0) break;
      for (ssize_t i = 0; i < n; ++i) lines += buf[static_cast<std::size_t>(i)] == '\n';
      at += n;
    }
    return lines;
  }

 private:
  std::int64_t parse_offset(const std::string& position) const {
    if (position.empty()) return 0;
    std::int64_t v = -1;
    auto [p, ec] = std::from_chars(position.data(), position.data() + position.size(), v);
    if (ec != std::errc() || p != position.data() + position.size() || v < 0)
      throw ConfigError("file source: checkpoint '" + position + "' is not a byte offset");
    return v;
  }

  // Opens the file once it exists (the relay may create it after the consumer starts).
  bool open() {
    if (fd_ >= 0) return true;
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ >= 0) return true;
    if (errno == ENOENT) return false;
    throw ConnectionError("file", "cannot open '" + path_ + "': " + std::strerror(errno));
  }

  std::vector<Message> read_now(std::size_t max) {
    std::vector<Message> out;
    if (!open()) return out;
    struct stat st {};
    if (::fstat(fd_, &st) != 0)
      throw ConnectionError("file", "stat '" + path_ + "': " + std::strerror(errno));
    if (st.st_size < offset_)
      throw Error(ErrorCode::corrupt, "file",
                  "'" + path_ + "' is shorter (" + std::to_string(st.st_size) +
                      " bytes) than the checkpoint (" + std::to_string(offset_) +
                      "): the log was truncated or replaced");
    std::size_t chunk = 1 << 20;
    while (out.size() < max && offset_ < st.st_size) {
      std::size_t want = static_cast<std::size_t>(
          std::min<std::int64_t>(static_cast<std::int64_t>(chunk), st.st_size - offset_));
      buf_.resize(want);
      ssize_t n = ::pread(fd_, buf_.data(), want, offset_);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw ConnectionError("file", "read '" + path_ + "': " + std::strerror(errno));
      }
      if (n == 0) break;
      std::size_t start = 0, got = static_cast<std::size_t>(n);
      bool whole_line = false;
      while (out.size() < max) {
        const void* nl = std::memchr(buf_.data() + start, '\n', got - start);
        if (!nl) break;
        std::size_t end = static_cast<std::size_t>(static_cast<const char*>(nl) - buf_.data());
        whole_line = true;
        std::int64_t next = offset_ + static_cast<std::int64_t>(end + 1);
        if (end > start)  // blank lines are skipped
          out.push_back(decode_message(buf_.substr(start, end - start), std::to_string(next)));
        start = end + 1;
      }
      offset_ += static_cast<std::int64_t>(start);
      if (!whole_line) {
        // A line longer than the chunk: read a larger one, or stop at an unfinished last line.
        if (got < want || static_cast<std::int64_t>(got) >= st.st_size - offset_) break;
        chunk *= 2;
      }
    }
    return out;
  }

  const std::string path_, url_;
  int fd_ = -1;
  std::int64_t offset_ = 0;  // next byte to read
  std::string buf_;
};

}  // namespace

std::unique_ptr<Source> open_file_source(const core::Url& u) {
  std::string path = u.local_path();
  if (path.empty() || path == "/" || path == "-")
    throw ConfigError("bad URL '" + u.redacted() + "': file: needs a path, e.g. file:events.jsonl");
  u.reject_unknown();
  return std::make_unique<FileSource>(std::move(path), u.redacted());
}

}  // namespace outpost::consume
