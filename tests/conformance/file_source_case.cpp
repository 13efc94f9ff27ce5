// Registers the file log with the Source conformance suite: the file sink writes a fresh file in
// a directory of the test's own, `file:PATH` reads it back.

#include <filesystem>

#include "outpost/sinks/file.h"
#include "source_cases.h"
#include "store_cases.h"

namespace {

const bool registered = outpost::testing::register_source_case({
    .name = "file",
    .scheme = "file",
    .unavailable_reason = [] { return outpost::testing::source_unavailable("file", nullptr); },
    .make =
        [] {
          std::string dir =
              outpost::testing::temp_dir() + "/" + outpost::testing::unique_name("srcconf");
          std::filesystem::create_directories(dir);
          std::string url = "file:" + dir + "/log.jsonl";
          return outpost::testing::SourceFixture{
              .sink = outpost::open_file_sink(url),
              .url = url,
              .cleanup = [dir] { std::filesystem::remove_all(dir); },
              .same_log = {"file:" + dir + "/./log.jsonl", "file://" + dir + "/log.jsonl"},
              .other_logs = {"file:" + dir + "/other.jsonl"},
          };
        },
});

}  // namespace
