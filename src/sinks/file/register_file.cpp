// Registers the file: sink scheme when outpost::file is linked in. Programs that link
// the target are linked with --undefined=outpost_register_file (cmake/OutpostLibrary.cmake,
// outpost-file.pc): that keeps this object file, and so the registration, in the program.

#include "outpost/factory.h"
#include "outpost/sinks/file.h"

extern "C" void outpost_register_file() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  outpost::register_sink_scheme("file", &outpost::open_file_sink, &outpost::check_file_sink_url);
  return true;
}();
}  // namespace
