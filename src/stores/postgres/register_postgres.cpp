// Registers the postgresql: and postgres: store scheme when outpost::postgres is linked in.
// Programs that link the target are linked with --undefined=outpost_register_postgres
// (cmake/OutpostLibrary.cmake, outpost-postgres.pc): that keeps this object file, and so the
// registration, in the program.

#include "outpost/stores/postgres.h"
#include "outpost/factory.h"
#include "stores/postgres/config.h"

extern "C" void outpost_register_postgres() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  constexpr outpost::StoreChecker check = [](std::string_view url) {
    outpost::StoreOptions options;
    outpost::pg::parse_config(url, options);
  };
  outpost::register_store_scheme("postgresql", &outpost::open_postgres_store, check);
  outpost::register_store_scheme("postgres", &outpost::open_postgres_store, check);
  return true;
}();
}  // namespace
