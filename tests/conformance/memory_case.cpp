// Registers the in-memory store with the store conformance suite.

#include "outpost/stores/memory.h"
#include "store_cases.h"

namespace {

const bool registered = outpost::testing::register_store_case({
    .name = "memory",
    .unavailable_reason = [] { return std::string(); },
    .make =
        [](const outpost::StoreOptions& options) {
          outpost::testing::StoreFixture f;
          f.store = outpost::make_memory_store(options);
          return f;  // no open_again, no transaction handle, no URL: nothing survives the object
        },
});

}  // namespace
