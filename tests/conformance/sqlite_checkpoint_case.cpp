// Registers SQLite with the CheckpointStore conformance suite: each fixture is a fresh file in
// the per-process temp directory, removed (with its WAL files) by cleanup.

#include <filesystem>

#include "checkpoint_cases.h"

namespace {

const bool registered = outpost::testing::register_checkpoint_case({
    .name = "sqlite",
    .unavailable_reason = [] { return std::string(); },
    .make =
        [] {
          std::string path =
              outpost::testing::temp_dir() + "/" + outpost::testing::unique_name("cpconf") + ".db";
          return outpost::testing::CheckpointFixture{
              .url = "sqlite:" + path + "?prefix=conf",
              .cleanup =
                  [path] {
                    for (const char* suffix : {"", "-wal", "-shm"})
                      std::filesystem::remove(path + suffix);
                  },
          };
        },
});

}  // namespace
