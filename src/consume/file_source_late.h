// The file source's line reader, and the file the last rotation finished, watched for lines a
// late writer still appends to it (docs/consumers.md, "Log rotation"). The reader is
// file_source.cpp.
//
// A position names the file being read and, after a rotation, also that finished file:
// `OFFSET@DEV:INO:BIRTH:FP+OFFSET@DEV:INO:BIRTH:FP`. Each message's position holds both offsets
// as they were when it was read, so a restart reads neither file's lines twice nor skips any.

#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "consume/file_identity.h"
#include "consume/message.h"

namespace outpost::consume::file_log {

// Whole lines of `f` from `offset` (moved past them), until `max` messages or no whole line is
// left; `position(next)` names the message that ends just before byte `next`. Blank lines are
// skipped; a last line without its '\n' is left unread (the writer may still be writing it).
void read_whole_lines(LogFile& f, std::int64_t& offset, std::vector<Message>& out, std::size_t max,
                      std::string& buf, const std::function<std::string(std::int64_t)>& position);

// A position split into the part that names the file being read and the finished file's part.
struct SplitPosition {
  std::string main;
  std::optional<Checkpoint> finished;  // always with an identity
};

// Throws ConfigError naming the position when the finished file's part is not `OFFSET@ID`.
SplitPosition split_position(const std::string& position);

// The file the last rotation finished, open, and how far it was read.
class FinishedFile {
 public:
  using Notice = std::function<void(const std::string&, bool)>;

  explicit operator bool() const { return static_cast<bool>(file_); }
  LogFile& file() { return file_; }
  std::int64_t offset() const { return offset_; }

  void watch(LogFile f, std::int64_t offset) {
    file_ = std::move(f);
    offset_ = offset;
    said_ = false;
  }
  void drop() { file_ = {}; }

  // "+OFFSET@ID", the part of a position that names it; "" when no file is watched.
  std::string suffix();
  // Bytes appended since it was read up to offset(), whole lines or not (0 when truncated).
  std::int64_t unread_bytes();
  // Whether a whole line was appended since.
  bool has_lines();
  // Its lines appended since, each named by `position(suffix())` as it is after that line. Says
  // once that it grew; a file shorter than what was read is dropped with a warning.
  void read(std::vector<Message>& out, std::size_t max, std::string& buf,
            const std::function<std::string(const std::string&)>& position, const Notice& notice);

 private:
  LogFile file_;
  std::int64_t offset_ = 0;
  bool said_ = false;  // "grew after it was finished" logged for this file
};

// The file watched before the last one, no longer read: its growth is said (a warning naming
// the bytes), never silent. Held until the next rotation retires another; not in positions.
class RetiredFile {
 public:
  void retire(LogFile f);
  const LogFile& file() const { return file_; }
  // Warns once per growth: "'LOG.2' grew by N bytes ... not read". Lets go of a deleted file.
  void check(const LogDirectory& dir, const FinishedFile::Notice& notice);

 private:
  LogFile file_;
  std::int64_t size_ = 0;  // as far as it was read or said
};

}  // namespace outpost::consume::file_log
