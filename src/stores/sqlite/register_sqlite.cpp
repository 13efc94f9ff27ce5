// Registers the sqlite: store scheme when outpost::sqlite is linked in. Programs that link
// the target are linked with --undefined=outpost_register_sqlite (cmake/OutpostLibrary.cmake,
// outpost-sqlite.pc): that keeps this object file, and so the registration, in the program.

#include "outpost/stores/sqlite.h"
#include "outpost/factory.h"
#include "stores/sqlite/sqlite_url.h"

extern "C" void outpost_register_sqlite() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  outpost::register_store_scheme("sqlite", &outpost::open_sqlite_store, [](std::string_view url) {
    outpost::sqlite_store::parse_url(url, {});
  });
  return true;
}();
}  // namespace
