// Registers the memory: store scheme when outpost::memory is linked in. Programs that link
// the target are linked with --undefined=outpost_register_memory (cmake/OutpostLibrary.cmake,
// outpost-memory.pc): that keeps this object file, and so the registration, in the program.

#include "outpost/stores/memory.h"
#include "outpost/factory.h"

extern "C" void outpost_register_memory() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  // A memory store has no side effect: opening it is the check.
  outpost::register_store_scheme("memory", &outpost::open_memory_store,
                                 [](std::string_view url) { outpost::open_memory_store(url); });
  return true;
}();
}  // namespace
