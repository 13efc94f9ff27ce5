// The file source (`file:PATH`): reads the JSON lines the file sink appends, and follows the log
// through rotation (docs/consumers.md, "Log rotation").
//
// A position is `OFFSET@DEV:INO:BIRTH:FP`: the byte offset just after the last whole line
// consumed, in the file with that device, inode and birth time (ns; 0 where the file system
// keeps none) whose first line (at most 1 KiB of it) hashes to FP. The birth time tells a file
// truncated in place from a new file that reuses a deleted one's inode. A
// bare `OFFSET` (written before positions had the file's identity) names the file at the path.
// A last line without its '\n' is still being written (or was torn by a crash and will be cut
// off by the sink): it is not read until its newline is there, and its bytes are never kept,
// because the writer may replace them.
//
// Rotation, as `tail -F` and Filebeat follow it: when the path names another file than the one
// being read (logrotate renamed it, the writer reopened the path), the renamed file is read to
// its end first, then the new one from byte 0. A checkpoint that points into a file that is no
// longer at the path is looked up by identity in the path's directory (LOG.1) and finished the
// same way. What cannot be found is an error naming the unread range, never a silent skip.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <tuple>

#include "consume/message.h"
#include "consume/sources.h"
#include "core/url.h"
#include "outpost/error.h"

namespace outpost::consume {
namespace {

// The fingerprint covers the file's first line, at most this much of it: enough to tell two
// files of the log apart (each line holds a unique event id), cheap to read again.
constexpr std::size_t kFingerprintBytes = 1024;

std::uint64_t fnv1a(const char* p, std::size_t n) {
  std::uint64_t h = 14695981039346656037ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 1099511628211ull;
  }
  return h;
}

ssize_t pread_full(int fd, char* buf, std::size_t n, std::int64_t at) {
  for (;;) {
    ssize_t got = ::pread(fd, buf, n, at);
    if (got >= 0 || errno != EINTR) return got;
  }
}

// The fingerprint of the file's first line (with its '\n'), or of its first kFingerprintBytes
// when that line is longer; none while the file has neither.
std::optional<std::uint64_t> fingerprint(int fd) {
  char buf[kFingerprintBytes];
  ssize_t n = pread_full(fd, buf, sizeof buf, 0);
  if (n <= 0) return std::nullopt;
  const auto got = static_cast<std::size_t>(n);
  if (const void* nl = std::memchr(buf, '\n', got))
    return fnv1a(buf, static_cast<std::size_t>(static_cast<const char*>(nl) - buf) + 1);
  if (got == sizeof buf) return fnv1a(buf, got);
  return std::nullopt;
}

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

struct Checkpoint {
  std::int64_t offset = 0;
  std::optional<Identity> id;  // none: "" or a bare offset (the file at the path)
};

Checkpoint parse_position(const std::string& position) {
  Checkpoint cp;
  if (position.empty()) return cp;
  auto bad = [&] {
    return ConfigError("file source: checkpoint '" + position +
                       "' is neither a byte offset nor OFFSET@DEVICE:INODE:BIRTH:FINGERPRINT");
  };
  const char* p = position.data();
  const char* end = p + position.size();
  auto [q, ec] = std::from_chars(p, end, cp.offset);
  if (ec != std::errc() || cp.offset < 0) throw bad();
  if (q == end) return cp;
  if (*q != '@') throw bad();
  Identity id;
  unsigned long long dev = 0, ino = 0;
  auto r1 = std::from_chars(q + 1, end, dev);
  if (r1.ec != std::errc() || r1.ptr == end || *r1.ptr != ':') throw bad();
  auto r2 = std::from_chars(r1.ptr + 1, end, ino);
  if (r2.ec != std::errc() || r2.ptr == end || *r2.ptr != ':') throw bad();
  auto r3 = std::from_chars(r2.ptr + 1, end, id.birth);
  if (r3.ec != std::errc() || r3.ptr == end || *r3.ptr != ':' || id.birth < 0) throw bad();
  if (r3.ptr + 1 != end) {
    std::uint64_t fp = 0;
    auto r4 = std::from_chars(r3.ptr + 1, end, fp, 16);
    if (r4.ec != std::errc() || r4.ptr != end) throw bad();
    id.fp = fp;
  }
  id.dev = static_cast<dev_t>(dev);
  id.ino = static_cast<ino_t>(ino);
  cp.id = id;
  return cp;
}

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

struct stat fstat_or_throw(int fd, const std::string& name) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw ConnectionError("file", "stat '" + name + "': " + std::strerror(errno));
  return st;
}

// Opens `name`; an empty LogFile when it does not exist.
LogFile open_log_file(const std::string& name) {
  LogFile f;
  int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return f;
    throw ConnectionError("file", "cannot open '" + name + "': " + std::strerror(errno));
  }
  f.fd = Fd(fd);
  struct stat st = fstat_or_throw(fd, name);
  f.id.dev = st.st_dev;
  f.id.ino = st.st_ino;
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_BTIME, &sx) == 0 && (sx.stx_mask & STATX_BTIME))
    f.id.birth =
        static_cast<std::int64_t>(sx.stx_btime.tv_sec) * 1'000'000'000 + sx.stx_btime.tv_nsec;
  f.name = name;
  return f;
}

struct DirEntry {
  std::string path, name;
  struct stat st {};
};

// The regular files of `dir` (following symlinks, as opening them would).
std::vector<DirEntry> list_dir(const std::string& dir) {
  std::vector<DirEntry> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return out;
    throw ConnectionError("file", "cannot list '" + dir + "': " + std::strerror(errno));
  }
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    DirEntry entry{dir + "/" + name, name, {}};
    if (::stat(entry.path.c_str(), &entry.st) == 0 && S_ISREG(entry.st.st_mode))
      out.push_back(std::move(entry));
  }
  ::closedir(d);
  return out;
}

bool compressed(std::string_view name) {
  for (std::string_view ext : {".gz", ".bz2", ".xz", ".zst", ".lz4", ".lzo", ".Z", ".zip"})
    if (name.ends_with(ext)) return true;
  return false;
}

// Whether `name` is a rotated name of the log file `base` as logrotate makes them: `LOG.N`
// (numbered; a larger N is older) or `LOG-SUFFIX` (dateext). Sets the order among files of one
// modification time: -N for numbered names, 0 otherwise.
bool rotated_name(const std::string& name, const std::string& base, std::int64_t& order) {
  if (name.size() <= base.size() + 1 || !name.starts_with(base)) return false;
  char sep = name[base.size()];
  std::string_view rest = std::string_view(name).substr(base.size() + 1);
  if (sep == '-') {
    order = 0;
    return std::isdigit(static_cast<unsigned char>(rest.front())) != 0;
  }
  if (sep != '.') return false;
  std::int64_t n = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
  if (ec != std::errc() || p != rest.data() + rest.size()) return false;
  order = -n;
  return true;
}

std::int64_t mtime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// The canonical name of the log: the real path of its directory and the file's name (not
// resolved: the name is what rotation replaces), so `log.jsonl` from its directory and
// `DIR/./log.jsonl` are one log, and one relative text from two directories two logs.
std::string canonical_log_path(const std::string& path, const std::string& shown) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw ConfigError("bad URL '" + shown + "': file: names a file, not a directory");
  fs::path dir = p.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  fs::path real = fs::canonical(dir, ec);
  if (ec) real = fs::absolute(dir, ec).lexically_normal();
  std::string d = real.string();
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return (d == "/" ? "" : d) + "/" + name;
}

// "file:" + path, with what the URL parser would read otherwise percent-encoded.
std::string file_url(const std::string& path) {
  std::string out = "file:";
  for (char c : path) {
    auto u = static_cast<unsigned char>(c);
    if (c == '%' || c == '?' || u < 0x20 || u == 0x7f) {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", u);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

std::int64_t count_lines(int fd, std::int64_t from) {
  std::int64_t lines = 0;
  std::string buf(1 << 20, '\0');
  for (std::int64_t at = from;;) {
    ssize_t n = pread_full(fd, buf.data(), buf.size(), at);
    if (n <= 0) break;
    lines += std::count(buf.data(), buf.data() + n, '\n');
    at += n;
  }
  return lines;
}

class FileSource final : public Source {
 public:
  FileSource(std::string path, std::string url)
      : path_(std::move(path)),
        dir_(std::filesystem::path(path_).parent_path().string()),
        base_(std::filesystem::path(path_).filename().string()),
        url_(std::move(url)) {}

  std::string_view name() const override { return "file"; }
  std::string url() const override { return url_; }
  bool can_read_ahead() const override { return true; }

  bool same_log(const std::string& stored_url) const override {
    if (stored_url == url_) return true;
    try {
      auto u = core::Url::parse(stored_url);
      return u.scheme() == "file" && canonical_log_path(u.local_path(), stored_url) == path_;
    } catch (const Error&) {
      return false;
    }
  }

  void set_notice(std::function<void(const std::string&, bool)> notice) override {
    notice_ = std::move(notice);
  }

  // Resolved at the next read (the file may not exist yet; finding it may need the directory).
  void seek(const std::string& position) override {
    pending_ = parse_position(position);
    finishing_ = false;
  }

  std::vector<Message> read(std::size_t max, Duration wait) override {
    auto deadline = std::chrono::steady_clock::now() + wait;
    for (;;) {
      auto out = read_now(max);
      if (!out.empty() || std::chrono::steady_clock::now() >= deadline) return out;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Lines after `position` in the log as it is now: the rest of the file it points into (found
  // by identity when it was rotated away), the rotated files after it, and the file at the path.
  std::optional<std::int64_t> lag(const std::string& position) override {
    Checkpoint cp = parse_position(position);
    LogFile current = open_log_file(path_);
    if (!cp.id) {
      if (!current) return 0;
      return count_lines(current.fd.get(), cp.offset);
    }
    if (current && current.id.same_file(*cp.id)) {
      auto st = fstat_or_throw(current.fd.get(), path_);
      bool same = (!cp.id->fp || current.identity().fp == cp.id->fp) && st.st_size >= cp.offset;
      return count_lines(current.fd.get(), same ? cp.offset : 0);  // truncated: read from 0
    }
    std::int64_t lines = current ? count_lines(current.fd.get(), 0) : 0;
    LogFile old = find_by_identity(*cp.id);
    if (!old) return lines;  // the rest of the lost file is unknown (reading it is an error)
    lines += count_lines(old.fd.get(), cp.offset);
    for (LogFile f = next_rotated(old, current); f; f = next_rotated(f, current))
      lines += count_lines(f.fd.get(), 0);
    return lines;
  }

 private:
  void notice(const std::string& m, bool warning) {
    if (notice_) notice_("file log '" + path_ + "': " + m, warning);
  }

  std::string position_at(std::int64_t offset) {
    return std::to_string(offset) + "@" + file_.identity().text();
  }

  // The file of `id` in the log's directory (a rotated name, or still the path), or none.
  LogFile find_by_identity(const Identity& id) {
    for (auto& e : list_dir(dir_)) {
      if (!id.is(e.st)) continue;
      LogFile f = open_log_file(e.path);
      if (!f || !f.id.same_file(id)) continue;          // another file with a reused inode
      if (id.fp && f.identity().fp != id.fp) continue;  // the inode was reused by another file
      return f;
    }
    return {};
  }

  // A copy of the file whose first line hashes to `fp` with at least `size` bytes, other than
  // `not_this` (logrotate's copytruncate copies the log, then truncates it in place).
  LogFile find_copy(std::uint64_t fp, std::int64_t size, const Identity& not_this) {
    for (auto& e : list_dir(dir_)) {
      if (not_this.is(e.st) || e.st.st_size < size) continue;
      std::int64_t order = 0;
      if (!rotated_name(e.name, base_, order)) continue;
      LogFile f = open_log_file(e.path);
      if (f && f.identity().fp == fp) return f;
    }
    return {};
  }

  // The oldest rotated file written after `after` (the log was rotated again while `after` was
  // read), other than the file at the path (`current`); none when `after` was the last one.
  // Compressed files cannot be read and are not considered (docs/consumers.md).
  LogFile next_rotated(LogFile& after, LogFile& current) {
    auto entries = list_dir(dir_);
    struct stat after_st = fstat_or_throw(after.fd.get(), after.name);
    std::tuple<std::int64_t, std::int64_t, std::string> after_key{mtime_ns(after_st), INT64_MIN,
                                                                  ""};
    for (auto& e : entries) {
      std::int64_t order = 0;
      if (after.id.is(e.st) && rotated_name(e.name, base_, order))
        after_key = {mtime_ns(e.st), order, e.name};
    }
    const DirEntry* best = nullptr;
    std::tuple<std::int64_t, std::int64_t, std::string> best_key;
    for (auto& e : entries) {
      std::int64_t order = 0;
      if (after.id.is(e.st) || (current && current.id.is(e.st)) || compressed(e.name) ||
          !rotated_name(e.name, base_, order))
        continue;
      std::tuple<std::int64_t, std::int64_t, std::string> key{mtime_ns(e.st), order, e.name};
      if (key <= after_key || (best && key >= best_key)) continue;
      best = &e;
      best_key = key;
    }
    if (!best) return {};
    LogFile f = open_log_file(best->path);
    // A copy of `after` (copytruncate) is not a later file.
    if (f && after.identity().fp && f.identity().fp == after.identity().fp) return {};
    return f;
  }

  // The checkpoint seek() was given, resolved to a file and offset. False while the log does
  // not exist yet.
  bool resolve() {
    Checkpoint cp = *pending_;
    if (!cp.id) {
      if (!file_ || !following_) {
        LogFile f = open_log_file(path_);
        if (!f) return false;
        file_ = std::move(f);
        following_ = true;
      }
      auto st = fstat_or_throw(file_.fd.get(), path_);
      if (st.st_size < cp.offset)
        throw Error(ErrorCode::corrupt, "file",
                    "'" + path_ + "' is shorter (" + std::to_string(st.st_size) +
                        " bytes) than the checkpoint (byte " + std::to_string(cp.offset) +
                        "), which an older outpost wrote without the file's identity: the log "
                        "was truncated or rotated, and where the rest of that file went is "
                        "unknown (docs/consumers.md, \"Log rotation\")");
      offset_ = cp.offset;
      pending_.reset();
      return true;
    }
    const Identity& want = *cp.id;
    auto matches = [&](LogFile& f) {
      return f && f.id.same_file(want) && (!want.fp || f.identity().fp == want.fp);
    };
    LogFile current = open_log_file(path_);
    if (matches(file_)) {
      // Re-seek within the file held open (after an outage): it may be gone from the directory.
    } else if (matches(previous_)) {
      file_ = std::move(previous_);
    } else if (current && current.id.same_file(want)) {
      // The path's file; if its first line changed it was truncated in place since (checked
      // before reading, in check_truncated: the checkpoint's fingerprint stays the reference).
      file_ = std::move(current);
      file_.id.fp = want.fp;
    } else if (LogFile old = find_by_identity(want)) {
      notice("the checkpoint (byte " + std::to_string(cp.offset) + ") is in '" + old.name +
                 "', rotated away from the path: reading it to its end first",
             false);
      file_ = std::move(old);
    } else {
      throw Error(
          ErrorCode::corrupt, "file",
          "'" + path_ + "' was rotated or replaced, and the file the checkpoint points into (" +
              want.describe() + ", read up to byte " + std::to_string(cp.offset) +
              ") is no longer in '" + dir_ + "': its bytes from " + std::to_string(cp.offset) +
              " to its end were not read. Put that file back into '" + dir_ +
              "' (uncompressed) and run again, or consume the log under a new group "
              "(docs/consumers.md, \"Log rotation\")");
    }
    struct stat pst {};
    following_ = ::stat(path_.c_str(), &pst) == 0 && file_.id.is(pst);
    offset_ = cp.offset;
    auto st = fstat_or_throw(file_.fd.get(), file_.name);
    if (!following_ && st.st_size < offset_)
      throw Error(ErrorCode::corrupt, "file",
                  "'" + file_.name + "' (" + want.describe() + "), rotated away from '" + path_ +
                      "', is shorter (" + std::to_string(st.st_size) +
                      " bytes) than the checkpoint (byte " + std::to_string(offset_) +
                      "): it was truncated after it was rotated");
    pending_.reset();
    return true;
  }

  // The file at the path was truncated in place (logrotate's copytruncate, or `> LOG`): it is
  // shorter than what was read, or its first line changed. Its copy, when logrotate left one
  // in the directory, holds the rest of what was read from: read that to its end first. Then
  // (or without a copy) the file is read again from byte 0, as Filebeat does.
  void check_truncated() {
    if (!following_ || offset_ == 0 || !file_.id.fp) return;
    auto st = fstat_or_throw(file_.fd.get(), path_);
    auto fp_now = fingerprint(file_.fd.get());
    if (st.st_size >= offset_ && fp_now == file_.id.fp) return;
    const std::uint64_t old_fp = *file_.id.fp;
    if (LogFile copy = find_copy(old_fp, offset_, file_.id)) {
      notice("truncated in place (copytruncate) after byte " + std::to_string(offset_) +
                 " was read; reading its copy '" + copy.name + "' from there to its end, then '" +
                 path_ + "' from byte 0",
             false);
      previous_ = std::move(file_);
      file_ = std::move(copy);
      following_ = false;
      return;
    }
    notice("truncated in place after byte " + std::to_string(offset_) +
               " was read, and no copy of it is in '" + dir_ +
               "': reading it again from byte 0; "
               "whatever followed byte " +
               std::to_string(offset_) +
               " before the truncation was not read (docs/consumers.md, \"Log rotation\")",
           true);
    offset_ = 0;
    file_.id.fp = fp_now;
  }

  // At the end of a file that is no longer the one at the path: once the path's file has data
  // (so the writer has moved on to it and appends to this one no more), read this one to its
  // end once more, hand on a torn last line as a message that is not an event, then go on with
  // the next rotated file or the path's file from byte 0. False when there is nothing to move to.
  bool move_on(std::vector<Message>& out) {
    LogFile current = open_log_file(path_);
    if (!current) return false;
    if (file_.id.dev == current.id.dev && file_.id.ino == current.id.ino) {
      following_ = true;  // back at the path (moved back by hand)
      return false;
    }
    if (fstat_or_throw(current.fd.get(), path_).st_size == 0) return false;
    if (!finishing_) {
      finishing_ = true;  // the caller reads this file to its end once more
      return true;
    }
    finishing_ = false;
    auto st = fstat_or_throw(file_.fd.get(), file_.name);
    if (st.st_size > offset_) {
      std::string tail(static_cast<std::size_t>(st.st_size - offset_), '\0');
      ssize_t n = pread_full(file_.fd.get(), tail.data(), tail.size(), offset_);
      tail.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
      std::int64_t end = offset_ + static_cast<std::int64_t>(tail.size());
      // An event whose '\n' is missing is handed on (a copy the relay sends again is skipped by
      // the inbox); a fragment is what a writer's crash tore, and the relay sends its event
      // again (the file sink cuts such a tail off the same way): said, not parked.
      Message m = decode_message(tail, position_at(end));
      if (m.parse_error.empty())
        out.push_back(std::move(m));
      else
        notice("'" + file_.name + "' ends in a torn line (bytes " + std::to_string(offset_) +
                   " to " + std::to_string(end) +
                   ", no newline, not an event): skipped; its event is delivered again by the "
                   "relay that wrote it",
               true);
      offset_ = end;
    }
    std::string finished = file_.name;
    std::int64_t at = offset_;
    LogFile next = next_rotated(file_, current);
    previous_ = std::move(file_);
    following_ = !next;
    file_ = next ? std::move(next) : std::move(current);
    offset_ = 0;
    notice("rotated: read '" + finished + "' to its end (byte " + std::to_string(at) +
               "), now reading '" + file_.name + "' from byte 0",
           false);
    return true;
  }

  std::vector<Message> read_now(std::size_t max) {
    std::vector<Message> out;
    if (pending_ && !resolve()) return out;
    if (!file_) {
      file_ = open_log_file(path_);  // the relay may create it after the consumer starts
      if (!file_) return out;
      following_ = true;
    }
    for (int moves = 0; moves < 16; ++moves) {
      check_truncated();
      read_lines(out, max);
      if (out.size() >= max) return out;
      if (following_) {
        struct stat pst {};
        if (::stat(path_.c_str(), &pst) != 0 || file_.id.is(pst)) return out;
        following_ = false;  // rotated: the path names another file now
      }
      if (!move_on(out)) return out;
    }
    return out;
  }

  // Whole lines of file_ from offset_, until `max` messages or no whole line is left.
  void read_lines(std::vector<Message>& out, std::size_t max) {
    auto st = fstat_or_throw(file_.fd.get(), file_.name);
    std::size_t chunk = 1 << 20;
    while (out.size() < max && offset_ < st.st_size) {
      std::size_t want = static_cast<std::size_t>(
          std::min<std::int64_t>(static_cast<std::int64_t>(chunk), st.st_size - offset_));
      buf_.resize(want);
      ssize_t n = pread_full(file_.fd.get(), buf_.data(), want, offset_);
      if (n < 0)
        throw ConnectionError("file", "read '" + file_.name + "': " + std::strerror(errno));
      if (n == 0) break;
      std::size_t start = 0, got = static_cast<std::size_t>(n);
      bool whole_line = false;
      std::string id_text;
      while (out.size() < max) {
        const void* nl = std::memchr(buf_.data() + start, '\n', got - start);
        if (!nl) break;
        std::size_t end = static_cast<std::size_t>(static_cast<const char*>(nl) - buf_.data());
        whole_line = true;
        if (id_text.empty()) id_text = "@" + file_.identity().text();  // the first line is whole
        std::int64_t next = offset_ + static_cast<std::int64_t>(end + 1);
        if (end > start)  // blank lines are skipped
          out.push_back(
              decode_message(buf_.substr(start, end - start), std::to_string(next) + id_text));
        start = end + 1;
      }
      offset_ += static_cast<std::int64_t>(start);
      if (!whole_line) {
        // A line longer than the chunk: read a larger one, or stop at an unfinished last line.
        if (got < want || static_cast<std::int64_t>(got) >= st.st_size - offset_) break;
        chunk *= 2;
      }
    }
  }

  const std::string path_, dir_, base_, url_;
  std::function<void(const std::string&, bool)> notice_;
  std::optional<Checkpoint> pending_ = Checkpoint{};  // seek() target, not resolved yet
  LogFile file_;            // the file being read: the one at the path, or a rotated one
  LogFile previous_;        // the file read before it (a re-seek into it needs no directory search)
  bool following_ = false;  // file_ is the file at the path
  bool finishing_ = false;  // file_ is rotated away: reading it to its end a last time
  std::int64_t offset_ = 0;  // next byte of file_ to read
  std::string buf_;
};

}  // namespace

std::unique_ptr<Source> open_file_source(const core::Url& u) {
  std::string path = u.local_path();
  if (path.empty() || path == "/" || path == "-")
    throw ConfigError("bad URL '" + u.redacted() + "': file: needs a path, e.g. file:events.jsonl");
  u.reject_unknown();
  // Canonical before it is stored as the group's log (docs/consumers.md, "Log rotation").
  std::string canonical = canonical_log_path(path, u.redacted());
  return std::make_unique<FileSource>(canonical, file_url(canonical));
}

}  // namespace outpost::consume
