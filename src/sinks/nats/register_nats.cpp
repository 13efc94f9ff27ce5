// Registers the nats: sink scheme when outpost::nats is linked in. Programs that link
// the target are linked with --undefined=outpost_register_nats (cmake/OutpostLibrary.cmake,
// outpost-nats.pc): that keeps this object file, and so the registration, in the program.

#include "outpost/factory.h"
#include "outpost/sinks/nats.h"

extern "C" void outpost_register_nats() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  outpost::register_sink_scheme("nats", &outpost::open_nats_sink, &outpost::check_nats_sink_url);
  return true;
}();
}  // namespace
