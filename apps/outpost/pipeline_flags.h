#pragma once
// The flags of `outpost relay` and `outpost consume`, made from their settings table
// (pipeline_settings.h), so a flag and its config key cannot drift apart.

#include <CLI/CLI.hpp>

#include <string>
#include <type_traits>
#include <vector>

#include "cli.h"
#include "pipeline_settings.h"

namespace outpost::cli {

// Adds a flag for each row of `rows`, storing into `into` (which must outlive parsing).
template <class C>
void add_setting_flags(CLI::App* sub, C& into, const std::vector<Setting<C>>& rows) {
  for (const auto& s : rows) {
    const std::string flag = s.flag(), help(s.help);
    std::visit(
        [&](auto field) {
          auto& value = into.*field;
          using T = std::remove_reference_t<decltype(value)>;
          if constexpr (std::is_same_v<T, bool>) {
            sub->add_flag(flag, value, help);
          } else if constexpr (std::is_same_v<T, std::string>) {
            CLI::Option* o = sub->add_option(flag, value, help);
            if (s.required) o->required();
            if (!s.env.empty()) o->envname(std::string(s.env));
            if (!s.choices.empty()) o->check(CLI::IsMember(s.choice_list()))->capture_default_str();
          } else {
            sub->add_option(flag, value, help)
                ->capture_default_str()
                ->check(CLI::Range(s.min, s.max));
          }
        },
        s.field);
  }
}

// What `outpost relay` and `outpost consume` add after their settings: --log-format (the daemon's
// [log] format) and the footer listing this build's URL schemes.
inline void add_log_format_and_schemes(CLI::App* sub, std::string& format) {
  sub->add_option("--log-format", format,
                  "text (default) or json: one JSON object per line; on a terminal, text adds a "
                  "progress line every 10 s")
      ->check(CLI::IsMember({"text", "json"}));
  sub->footer(supported_schemes_text());
}

}  // namespace outpost::cli
