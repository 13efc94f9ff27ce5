// The settings table of apps/outpost/pipeline_settings.h: every row is a flag and a key, and a
// reload (which compares pipelines with same_settings) sees a change of any of them.

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>

#include "pipeline_settings.h"

namespace outpost::unit {
namespace {

// `c` with the field of `row` changed to another valid value.
template <class C>
C changed(C c, const cli::Setting<C>& row) {
  std::visit(
      [&](auto field) {
        auto& v = c.*field;
        using T = std::remove_reference_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>)
          v += "x";
        else if constexpr (std::is_same_v<T, bool>)
          v = !v;
        else
          v = static_cast<T>(v == static_cast<T>(row.min) ? row.min + 1 : row.min);
      },
      row.field);
  return c;
}

template <class C>
void expect_every_row_counts(const std::vector<cli::Setting<C>>& rows) {
  std::set<std::string> keys;
  for (const auto& row : rows) {
    EXPECT_TRUE(keys.insert(std::string(row.key)).second) << "key twice: " << row.key;
    EXPECT_EQ(row.flag().find('_'), std::string::npos) << row.flag();
    EXPECT_EQ(row.flag().rfind("--", 0), 0u) << row.flag();
    const C base;
    EXPECT_TRUE(cli::same_settings(base, base, rows));
    EXPECT_FALSE(cli::same_settings(base, changed(base, row), rows)) << row.key;
  }
}

TEST(PipelineSettings, EveryRelayRowIsAFlagAKeyAndAChangeOnReload) {
  expect_every_row_counts(cli::relay_settings());
  EXPECT_EQ(cli::relay_settings()[4].flag(), "--max-attempts");
}

TEST(PipelineSettings, EveryConsumeRowIsAFlagAKeyAndAChangeOnReload) {
  expect_every_row_counts(cli::consume_settings());
  bool until_idle = false;
  for (const auto& row : cli::consume_settings()) until_idle |= row.flag() == "--until-idle";
  EXPECT_TRUE(until_idle);
}

TEST(PipelineSettings, ChoicesAreListedOnePerElement) {
  cli::Setting<cli::PipelineConfig> row{"on_dead", "", &cli::PipelineConfig::store};
  EXPECT_TRUE(row.choice_list().empty());
  row.choices = "hold|continue";
  EXPECT_EQ(row.choice_list(), (std::vector<std::string>{"hold", "continue"}));
}

}  // namespace
}  // namespace outpost::unit
