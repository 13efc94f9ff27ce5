#pragma once
// The file sink (`file:PATH`): appends each delivered event as one line of the JSON encoding
// (outpost/json.h, docs/cli.md "The JSON encoding") and fdatasync()s the file before reporting
// the batch delivered (README, guarantee 3: ack after delivery), so a line that was acked survives
// a crash of the machine.
//
//   file:/var/log/outpost/events.jsonl    absolute path     file:events.jsonl   relative path
//   file:///var/log/outpost/events.jsonl  the same, URL form
//   file:-                                 standard output (flushed, fsync only if it is a file)
//
// The file is opened with O_APPEND and created (mode 0644) when missing; its directory must
// exist. A file renamed or removed underneath the sink (log rotation) is reopened at PATH on the
// next batch. A failed open, write or fsync gives every event of the batch one outcome with the
// errno text, its class decided by file::classify (docs/sinks_file_http.md, "Failure classes
// (file)"): a full or failing disk is `unavailable` ("unavailable: write '/x': No space left on
// device"), a pipe whose reader went away closes the sink (closed()).
// No URL parameters.
//
// Thread safety: deliver() may be called from several threads; batches are serialised.

#include <memory>
#include <string_view>

#include "outpost/sink.h"

namespace outpost {

// Throws ConfigError for a malformed URL or a directory that does not exist / is not writable,
// ConnectionError for other open failures; both name the path.
std::unique_ptr<Sink> open_file_sink(std::string_view url, const SinkOptions& options = {});
// The parse-only half of open_file_sink (check_sink_url): throws the ConfigError it would for a
// malformed URL or a directory that does not exist, and creates nothing.
void check_file_sink_url(std::string_view url);

}  // namespace outpost
