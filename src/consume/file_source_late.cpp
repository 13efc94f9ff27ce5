// The file source's line reader and the finished file watched for late lines (file_source_late.h,
// docs/consumers.md, "Log rotation").

#include "consume/file_source_late.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "outpost/error.h"

namespace outpost::consume::file_log {

void read_whole_lines(LogFile& f, std::int64_t& offset, std::vector<Message>& out, std::size_t max,
                      std::string& buf, const std::function<std::string(std::int64_t)>& position) {
  auto st = fstat_or_throw(f.fd.get(), f.name);
  std::size_t chunk = 1 << 20;
  while (out.size() < max && offset < st.st_size) {
    std::size_t want = static_cast<std::size_t>(
        std::min<std::int64_t>(static_cast<std::int64_t>(chunk), st.st_size - offset));
    buf.resize(want);
    ssize_t n = pread_full(f.fd.get(), buf.data(), want, offset);
    if (n < 0) throw ConnectionError("file", "read '" + f.name + "': " + std::strerror(errno));
    if (n == 0) break;
    std::size_t start = 0, got = static_cast<std::size_t>(n);
    bool whole_line = false;
    while (out.size() < max) {
      const void* nl = std::memchr(buf.data() + start, '\n', got - start);
      if (!nl) break;
      std::size_t end = static_cast<std::size_t>(static_cast<const char*>(nl) - buf.data());
      whole_line = true;
      std::int64_t next = offset + static_cast<std::int64_t>(end + 1);
      if (end > start)  // blank lines are skipped
        out.push_back(decode_message(buf.substr(start, end - start), position(next)));
      start = end + 1;
    }
    offset += static_cast<std::int64_t>(start);
    if (!whole_line) {
      // A line longer than the chunk: read a larger one, or stop at an unfinished last line.
      if (got < want || static_cast<std::int64_t>(got) >= st.st_size - offset) break;
      chunk *= 2;
    }
  }
}

SplitPosition split_position(const std::string& position) {
  auto plus = position.find('+');
  if (plus == std::string::npos) return {position, std::nullopt};
  SplitPosition sp{position.substr(0, plus), parse_position(position.substr(plus + 1))};
  if (!sp.finished->id || sp.main.empty())
    throw ConfigError("file source: checkpoint '" + position +
                      "' is not OFFSET@DEVICE:INODE:BIRTH:FINGERPRINT followed by the rotated "
                      "file's +OFFSET@DEVICE:INODE:BIRTH:FINGERPRINT");
  return sp;
}

std::string FinishedFile::suffix() {
  if (!file_) return {};
  return "+" + std::to_string(offset_) + "@" + file_.identity().text();
}

std::int64_t FinishedFile::unread_bytes() {
  if (!file_) return 0;
  return std::max<std::int64_t>(fstat_or_throw(file_.fd.get(), file_.name).st_size - offset_, 0);
}

bool FinishedFile::has_lines() {
  std::int64_t n = unread_bytes();
  if (n == 0) return false;
  std::string buf(static_cast<std::size_t>(std::min<std::int64_t>(n, 1 << 20)), '\0');
  for (std::int64_t at = offset_; at < offset_ + n;) {
    ssize_t got = pread_full(file_.fd.get(), buf.data(), buf.size(), at);
    if (got <= 0) return false;
    if (std::memchr(buf.data(), '\n', static_cast<std::size_t>(got))) return true;
    at += got;
  }
  return false;
}

void FinishedFile::read(std::vector<Message>& out, std::size_t max, std::string& buf,
                        const std::function<std::string(const std::string&)>& position,
                        const Notice& notice) {
  if (!file_) return;
  auto size = fstat_or_throw(file_.fd.get(), file_.name).st_size;
  if (size == offset_) return;
  if (size < offset_) {
    // Nothing of it can be told apart any more: what was read and what was appended since.
    notice("'" + file_.name + "', finished by a rotation at byte " + std::to_string(offset_) +
               ", was truncated to " + std::to_string(size) +
               " bytes since: no longer watched for late lines",
           true);
    drop();
    return;
  }
  if (!said_) {
    said_ = true;
    notice("'" + file_.name + "' grew after it was finished (a writer still appended to it): " +
               "reading its lines from byte " + std::to_string(offset_),
           false);
  }
  const std::string id_text = "@" + file_.identity().text();
  read_whole_lines(file_, offset_, out, max, buf, [&](std::int64_t next) {
    return position("+" + std::to_string(next) + id_text);
  });
}

void RetiredFile::retire(LogFile f) {
  file_ = std::move(f);
  size_ = file_ ? fstat_or_throw(file_.fd.get(), file_.name).st_size : 0;
}

void RetiredFile::check(const LogDirectory& dir, const FinishedFile::Notice& notice) {
  if (!file_) return;
  auto st = fstat_or_throw(file_.fd.get(), file_.name);
  if (st.st_size > size_) {
    LogFile now_at = dir.find_by_identity(file_.identity());  // LOG.2 by now, most likely
    if (now_at) file_.name = now_at.name;
    notice("'" + file_.name + "' grew by " + std::to_string(st.st_size - size_) + " bytes (" +
               std::to_string(size_) + " to " + std::to_string(st.st_size) +
               ") after a later rotation finished another file: those lines are not read "
               "(docs/consumers.md, \"Log rotation\")",
           true);
  }
  size_ = st.st_size;
  // Deleted: its space is let go (a writer still holding it is no longer watched either).
  if (st.st_nlink == 0) file_ = {};
}

}  // namespace outpost::consume::file_log
