#pragma once
// What opening may do, one enum for the outbox (StoreOptions::open) and for consumer state
// (open_checkpoint_store): the CLI's inspecting commands open with existing or read_only so that
// a typo in a path or prefix is an error instead of a new, empty outbox (docs/cli.md).

namespace outpost {

// create: make what is missing (the outbox; the consumer tables; a SQLite file).
// existing: open only what is there; none is ErrorCode::not_found naming the place, and nothing
// is created.
// read_only: as existing, and nothing is written where the engine can promise it (a SQLite
// outbox refuses writes); elsewhere it opens as existing (StoreOptions and checkpoint_store.h say
// which).
enum class OpenMode { create, existing, read_only };

}  // namespace outpost
