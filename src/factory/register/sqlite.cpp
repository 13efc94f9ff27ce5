// Registers the sqlite: store scheme when outpost::sqlite is linked in. Programs that link
// the target are linked with --undefined=outpost_register_sqlite (cmake/OutpostLibrary.cmake,
// outpost-sqlite.pc): that keeps this object file, and so the registration, in the program.

#include "outpost/stores/sqlite.h"
#include "outpost/factory.h"

extern "C" void outpost_register_sqlite() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  outpost::register_store_scheme("sqlite", &outpost::open_sqlite_store);
  return true;
}();
}  // namespace
