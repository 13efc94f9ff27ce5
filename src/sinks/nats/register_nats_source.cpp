// Registers the nats: source scheme when outpost::nats_source is linked in. Programs that
// link the target are linked with --undefined=outpost_register_nats_source
// (cmake/OutpostLibrary.cmake): that keeps this object file, and so the registration, in the
// program.

#include "consume/sources.h"
#include "outpost/factory.h"

extern "C" void outpost_register_nats_source() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  outpost::register_source_scheme("nats", &outpost::consume::open_nats_source);
  return true;
}();
}  // namespace
