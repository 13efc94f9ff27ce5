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
// After moving on, the finished file is watched for lines a late writer still appends to it (a
// second writer, a batch in flight on the old descriptor) until the next rotation finishes
// another file; the position then names both files (file_source_late.h).
// The identity, the position's encoding and the lookups in the directory are in
// file_identity.{h,cpp}; the line reader and the watched file in file_source_late.{h,cpp}.

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

#include "consume/file_identity.h"
#include "consume/file_source_late.h"
#include "consume/message.h"
#include "consume/sources.h"
#include "core/url.h"
#include "outpost/error.h"

namespace outpost::consume {
namespace {

using file_log::Checkpoint;
using file_log::fingerprint;
using file_log::FinishedFile;
using file_log::fstat_or_throw;
using file_log::Identity;
using file_log::LogDirectory;
using file_log::LogFile;
using file_log::open_log_file;
using file_log::parse_position;
using file_log::pread_full;
using file_log::read_whole_lines;
using file_log::RetiredFile;
using file_log::split_position;

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
  // The file may not exist yet (the consumer waits for it); its directory must: a log in a
  // directory that is not there is a typo the consumer would wait on forever.
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw ConfigError("bad URL '" + shown + "': file: the directory '" + dir.string() +
                      "' does not exist");
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
    auto sp = split_position(position);
    pending_ = parse_position(sp.main);
    pending_finished_ = sp.finished;
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
  // Plus the late lines of the finished file the position names beside it.
  std::optional<std::int64_t> lag(const std::string& position) override {
    auto sp = split_position(position);
    Checkpoint cp = parse_position(sp.main);
    std::int64_t late = 0;
    if (sp.finished && !(cp.id && cp.id->same_file(*sp.finished->id))) {
      LogFile f = logdir_.find_by_identity(*sp.finished->id);
      if (f && fstat_or_throw(f.fd.get(), f.name).st_size >= sp.finished->offset)
        late = count_lines(f.fd.get(), sp.finished->offset);
    }
    std::vector<Identity> read;  // the finished file is counted above, not again as rotated
    if (sp.finished) read.push_back(*sp.finished->id);
    return late + lag_in(cp, read);
  }

  // The file at the path only: a group moved to its beginning or to a time does not go back
  // into rotated files (docs/consumers.md, "Moving and deleting a group").
  std::string position_for(const SeekTarget& t) override {
    LogFile current = open_log_file(path_);
    if (t.kind == SeekTarget::Kind::position) {
      // ConfigError naming it; the finished file's part is taken as it is.
      Checkpoint cp = parse_position(split_position(t.position).main);
      // In the file at the path (when it names that one), a position is the start of a line.
      if (current && (!cp.id || current.id.same_file(*cp.id))) {
        auto st = fstat_or_throw(current.fd.get(), path_);
        // Past the end the group would skip what is appended until the file gets that far
        // (docs/consumers.md, "Moving and deleting a group"): named as the other sources do.
        if (cp.offset > st.st_size)
          throw ConfigError(
              "file source: position '" + t.position + "' is past the end of '" + path_ +
              "' (its end: " + std::to_string(whole_lines_end(current.fd.get(), st.st_size)) + "@" +
              current.identity().text() + ", " + std::to_string(st.st_size) + " bytes)");
        char before = '\n';
        if ((cp.offset > 0 && pread_full(current.fd.get(), &before, 1, cp.offset - 1) != 1) ||
            before != '\n')
          throw ConfigError("file source: position '" + t.position +
                            "' is not the start of a line of '" + path_ + "' (" +
                            std::to_string(st.st_size) + " bytes)");
      }
      return t.position;
    }
    if (!current) return "";  // no log yet: its beginning
    auto at = [&](std::int64_t offset) {
      return std::to_string(offset) + "@" + current.identity().text();
    };
    if (t.kind == SeekTarget::Kind::beginning) return at(0);
    // The end (after the last whole line), or the start of the first whole line whose event
    // occurred at or after t.time.
    std::int64_t line_start = 0, end = 0;
    std::string line;
    std::string buf(1 << 20, '\0');
    for (std::int64_t pos = 0;;) {
      ssize_t n = pread_full(current.fd.get(), buf.data(), buf.size(), pos);
      if (n <= 0) break;
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] != '\n') {
          line += buf[i];
          continue;
        }
        end = pos + i + 1;
        if (t.kind == SeekTarget::Kind::time) {
          Message m = decode_message(std::move(line), "");
          if (m.parse_error.empty() && m.event.occurred_at >= t.time) return at(line_start);
        }
        line.clear();
        line_start = end;
      }
      pos += n;
    }
    return at(end);
  }

 private:
  // lag() of the part of a position that names the file being read.
  std::int64_t lag_in(const Checkpoint& cp, const std::vector<Identity>& read) {
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
    LogFile old = logdir_.find_by_identity(*cp.id);
    if (!old) return lines;  // the rest of the lost file is unknown (reading it is an error)
    lines += count_lines(old.fd.get(), cp.offset);
    for (LogFile f = logdir_.next_rotated(old, current, read); f;
         f = logdir_.next_rotated(f, current, read))
      lines += count_lines(f.fd.get(), 0);
    return lines;
  }

  // The offset just after the last '\n' before `size` (0 when there is none): the end of the
  // whole lines, as `--to end` resolves it.
  std::int64_t whole_lines_end(int fd, std::int64_t size) {
    char buf[4096];
    for (std::int64_t to = size; to > 0;) {
      std::int64_t from = std::max<std::int64_t>(to - static_cast<std::int64_t>(sizeof buf), 0);
      ssize_t n = pread_full(fd, buf, static_cast<std::size_t>(to - from), from);
      if (n <= 0) return 0;
      for (ssize_t i = n; i > 0; --i)
        if (buf[i - 1] == '\n') return from + i;
      to = from;
    }
    return 0;
  }

  void notice(const std::string& m, bool warning) {
    if (notice_) notice_("file log '" + path_ + "': " + m, warning);
  }

  std::string position_at(std::int64_t offset) {
    return std::to_string(offset) + "@" + file_.identity().text();
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
      resolve_finished();
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
    } else if (LogFile old = logdir_.find_by_identity(want)) {
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
    resolve_finished();
    return true;
  }

  // The finished file the checkpoint names beside the file being read: watched again for late
  // lines from its offset. Gone from the directory (deleted by the rotation's count), it can no
  // longer grow where a restart would find it: said, and no longer watched.
  void resolve_finished() {
    std::optional<Checkpoint> cp = std::move(pending_finished_);
    pending_finished_.reset();
    if (!cp) {
      finished_.drop();
      return;
    }
    const Identity& want = *cp->id;
    auto matches = [&](LogFile& f) {
      return f && f.id.same_file(want) && (!want.fp || f.identity().fp == want.fp);
    };
    if (matches(file_)) {
      finished_.drop();  // the file being read (moved back by hand): nothing to watch beside it
    } else if (matches(finished_.file())) {
      finished_.watch(std::move(finished_.file()), cp->offset);
    } else if (LogFile f = logdir_.find_by_identity(want)) {
      finished_.watch(std::move(f), cp->offset);
    } else {
      notice("the file finished by the last rotation (" + want.describe() + ", read up to byte " +
                 std::to_string(cp->offset) + ") is no longer in '" + dir_ +
                 "': no longer watched for late lines",
             false);
      finished_.drop();
    }
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
    if (LogFile copy = logdir_.find_copy(old_fp, offset_, file_.id)) {
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
    // The late lines of the file finished before, first: it is replaced below.
    if (finished_.has_lines()) return true;
    finishing_ = false;
    // The finished file where it is now (LOG.1 after logrotate's rename), not the path it was
    // opened at, which names the file reopened below.
    LogFile now_at = logdir_.find_by_identity(file_.identity());
    const bool in_dir = static_cast<bool>(now_at);
    const std::string name = in_dir ? now_at.name : file_.name;
    now_at = {};
    std::int64_t watch_from = offset_;
    auto st = fstat_or_throw(file_.fd.get(), file_.name);
    if (st.st_size > offset_) {
      std::string tail(static_cast<std::size_t>(st.st_size - offset_), '\0');
      ssize_t n = pread_full(file_.fd.get(), tail.data(), tail.size(), offset_);
      tail.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
      std::int64_t end = offset_ + static_cast<std::int64_t>(tail.size());
      // An event whose '\n' is missing is handed on (a copy the relay sends again is skipped by
      // the inbox). A fragment is a line still being written (a batch in flight on the old
      // descriptor) or torn by a writer's crash (the relay sends its event again; the file sink
      // cuts such a tail off the same way): watched from its start, so a line finished later is
      // read whole; one never finished is skipped with a warning when the watch ends.
      Message m = decode_message(tail, position_at(end) + finished_.suffix());
      if (m.parse_error.empty()) {
        out.push_back(std::move(m));
        watch_from = end;
      } else {
        notice("'" + name + "' ends in an unfinished line (bytes " + std::to_string(offset_) +
                   " to " + std::to_string(end) +
                   ", no newline, not an event): read once its writer finishes it",
               false);
      }
      offset_ = end;
    }
    std::string finished = "'" + name + "'" + (in_dir ? "" : " (no longer in its directory)");
    std::int64_t at = offset_;
    // Watched from here on for lines a late writer appends to it, instead of the one before.
    if (std::int64_t torn = finished_.unread_bytes())
      notice("'" + finished_.file().name + "' ends in " + std::to_string(torn) +
                 " bytes without a newline (a line its writer never finished: a crash; the relay "
                 "that wrote it delivers its event again): skipped; no longer watched",
             true);
    if (finished_) retired_.retire(std::move(finished_.file()));
    LogFile watched;
    watched.fd = file_log::Fd(::fcntl(file_.fd.get(), F_DUPFD_CLOEXEC, 0));
    if (!watched.fd)
      throw ConnectionError("file", "dup '" + file_.name + "': " + std::strerror(errno));
    watched.id = file_.identity();
    watched.name = name;
    finished_.watch(std::move(watched), watch_from);
    // Never one of the files already read, even when a late write made it look newer.
    std::vector<Identity> read{finished_.file().id};
    if (previous_) read.push_back(previous_.id);
    if (retired_.file()) read.push_back(retired_.file().id);
    LogFile next = logdir_.next_rotated(file_, current, read);
    previous_ = std::move(file_);
    following_ = !next;
    file_ = next ? std::move(next) : std::move(current);
    offset_ = 0;
    notice("rotated: read " + finished + " to its end (byte " + std::to_string(at) +
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
    retired_.check(logdir_, [&](const std::string& m, bool warning) { notice(m, warning); });
    for (int moves = 0; moves < 16; ++moves) {
      check_truncated();
      finished_.read(
          out, max, buf_, [&](const std::string& suffix) { return position_at(offset_) + suffix; },
          [&](const std::string& m, bool warning) { notice(m, warning); });
      if (out.size() >= max) return out;
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
    std::string id_text;
    read_whole_lines(file_, offset_, out, max, buf_, [&](std::int64_t next) {
      // The fingerprint needs the first line whole: it is, once a line ends.
      if (id_text.empty()) id_text = "@" + file_.identity().text() + finished_.suffix();
      return std::to_string(next) + id_text;
    });
  }

  const std::string path_, dir_, base_, url_;
  const LogDirectory logdir_{dir_, base_};
  std::function<void(const std::string&, bool)> notice_;
  std::optional<Checkpoint> pending_ = Checkpoint{};  // seek() target, not resolved yet
  std::optional<Checkpoint> pending_finished_;        // its finished file's part
  LogFile file_;            // the file being read: the one at the path, or a rotated one
  LogFile previous_;        // the file read before it (a re-seek into it needs no directory search)
  bool following_ = false;  // file_ is the file at the path
  bool finishing_ = false;  // file_ is rotated away: reading it to its end a last time
  FinishedFile finished_;   // the file the last rotation finished, read on when it grows
  RetiredFile retired_;     // the one finished before it: its growth is said, not read
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
