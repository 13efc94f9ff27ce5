#pragma once
// The Redis store's reads for inspection (list.lua, inspect.lua, the archive) and the parsing of
// one event of a script's reply; see redis_scripts.h for the keys.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/store.h"
#include "stores/redis/redis_client.h"

namespace outpost::redis_store {

// id, body, seq of one event of a claim or list reply (f[0..2]). A malformed body throws
// (corrupt) when `strict`, else leaves the fields empty.
void fill(StoredEvent& e, redisReply** f, const std::string& base, bool strict = true);

// Live ("live") or dead ("dead") events in seq order (list.lua).
std::vector<DeadEvent> read_list(Client& client, const Script& script, std::string_view key,
                                 const std::string& base, std::string_view which,
                                 std::size_t limit);

// Blocked heads ("blocked") or events under a live lease ("leased") (inspect.lua).
std::vector<EventState> read_inspect(Client& client, const Script& script, std::string_view key,
                                     const std::string& base, std::string_view which,
                                     std::size_t limit);

// The newest archived events first.
std::vector<ArchivedEvent> read_archived(Client& client, const std::string& base,
                                         std::size_t limit);

}  // namespace outpost::redis_store
