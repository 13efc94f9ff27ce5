// One open-mode enum (outpost/open_mode.h) for the outbox and for consumer state: the store's
// StoreOptions::Open and the consumer's CheckpointOpen are the same type, and existing and
// read_only never create what is not there (a mistyped path is an error, not a new database).

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <type_traits>

#include "outpost/checkpoint_store.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/open_mode.h"
#include "outpost/store.h"
#include "store_cases.h"

namespace outpost {
namespace {

static_assert(std::is_same_v<StoreOptions::Open, OpenMode>);
static_assert(std::is_same_v<CheckpointOpen, OpenMode>);

std::string missing_sqlite_file() {
  return testing::temp_dir() + "/" + testing::unique_name("missing") + ".db";
}

TEST(OpenMode, ExistingAndReadOnlyCreateNoOutbox) {
  for (OpenMode mode : {OpenMode::existing, OpenMode::read_only}) {
    const auto path = missing_sqlite_file();
    StoreOptions options;
    options.open = mode;
    try {
      open_store("sqlite:" + path, options);
      ADD_FAILURE() << "opened an outbox that is not there: " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::not_found) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << path;
  }
}

TEST(OpenMode, ExistingAndReadOnlyCreateNoConsumerState) {
  for (OpenMode mode : {OpenMode::existing, OpenMode::read_only}) {
    const auto path = missing_sqlite_file();
    try {
      open_checkpoint_store("sqlite:" + path, mode);
      ADD_FAILURE() << "opened consumer state that is not there: " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::not_found) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << path;
  }
}

TEST(OpenMode, CreateMakesBothAndExistingThenOpensThem) {
  const auto path = missing_sqlite_file();
  StoreOptions create;
  create.open = OpenMode::create;
  open_store("sqlite:" + path, create);
  open_checkpoint_store("sqlite:" + path, OpenMode::create)->groups();  // tables on first use
  StoreOptions existing;
  existing.open = OpenMode::existing;
  EXPECT_NO_THROW(open_store("sqlite:" + path, existing));
  EXPECT_TRUE(open_checkpoint_store("sqlite:" + path, OpenMode::read_only)->groups().empty());
}

}  // namespace
}  // namespace outpost
