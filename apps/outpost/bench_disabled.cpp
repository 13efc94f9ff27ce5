// `outpost bench` in a build configured with -DOUTPOST_BUILD_BENCH=OFF.
#include "cli.h"
#include "outpost/error.h"

namespace outpost::cli {

Runner add_bench_command(CLI::App& root) {
  root.add_subcommand("bench",
                      "Benchmark (not in this build: configure with OUTPOST_BUILD_BENCH=ON)")
      ->allow_extras();
  return []() -> int {
    throw ConfigError("bench: this build has no benchmark (OUTPOST_BUILD_BENCH=OFF)");
  };
}

}  // namespace outpost::cli
