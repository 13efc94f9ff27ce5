#pragma once
// The in-memory store (`memory:`): the same life cycle as every other store, kept in the
// process. For users' unit tests and for benchmarking a sink without a database. Nothing
// survives the process. Transaction handles are not supported (TxHandle{} only).

#include <memory>
#include <string_view>

#include "outpost/store.h"

namespace outpost {

std::unique_ptr<Store> make_memory_store(const StoreOptions& options = {});
// "memory:", with the archive and retention parameters every store takes: `archive=1`,
// `archive_retention=D`, `dead_retention=D` (docs/configuration.md, "Store URLs").
std::unique_ptr<Store> open_memory_store(std::string_view url, const StoreOptions& options = {});

}  // namespace outpost
