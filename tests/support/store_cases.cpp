#include "store_cases.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <random>

namespace outpost::testing {

static std::vector<StoreCase>& registry() {
  static std::vector<StoreCase> cases;
  return cases;
}

bool register_store_case(StoreCase store_case) {
  registry().push_back(std::move(store_case));
  return true;
}

const std::vector<StoreCase>& store_cases() {
  return registry();
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

bool require_all_endpoints() {
  return env("OUTPOST_TEST_REQUIRE_ALL").value_or("0") == "1";
}

std::string unique_name(const std::string& prefix) {
  static std::atomic<unsigned> counter{0};
  static const unsigned salt = std::random_device{}() % 100000;
  return prefix + std::to_string(::getpid()) + "_" + std::to_string(salt) + "_" +
         std::to_string(counter++);
}

std::string temp_dir() {
  static const std::string dir = [] {
    auto base =
        std::filesystem::temp_directory_path() / ("outpost_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(base);
    return base.string();
  }();
  return dir;
}

}  // namespace outpost::testing
