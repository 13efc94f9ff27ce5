#pragma once
// How far apart two words are, for "did you mean" on a misspelt flag, config key or URL
// parameter or event JSON field (apps/outpost/main.cpp, config.cpp, src/sinks/http/http_url.cpp,
// src/core/json_read.cpp): one rule, so the same typo is recognised everywhere.

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string_view>
#include <vector>

namespace outpost::core {

// Whether 'Key' and 'key' differ: flags, config keys and URL parameters are case-sensitive
// names; event JSON field names are matched ignoring ASCII case, so "Kye" still finds "key".
enum class Case { counts, ignored };

// Optimal string alignment distance: insertions, deletions, substitutions and a swap of two
// neighbours each count one ('btach' is one edit from 'batch').
inline std::size_t edit_distance(std::string_view a, std::string_view b,
                                 Case letter_case = Case::counts) {
  auto same = [letter_case](char x, char y) {
    if (letter_case == Case::ignored) {
      x = static_cast<char>(std::tolower(static_cast<unsigned char>(x)));
      y = static_cast<char>(std::tolower(static_cast<unsigned char>(y)));
    }
    return x == y;
  };
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::size_t> d((n + 1) * (m + 1));
  auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * (m + 1) + j]; };
  for (std::size_t i = 0; i <= n; ++i) at(i, 0) = i;
  for (std::size_t j = 0; j <= m; ++j) at(0, j) = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = same(a[i - 1], b[j - 1]) ? 0 : 1;
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1]))
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
    }
  return at(n, m);
}

}  // namespace outpost::core
