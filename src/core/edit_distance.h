#pragma once
// How far apart two words are, for "did you mean" on a misspelt flag, config key or URL
// parameter (apps/outpost/main.cpp, config.cpp, src/sinks/http/http_url.cpp): one rule, so the
// same typo is recognised everywhere.

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

namespace outpost::core {

// Optimal string alignment distance: insertions, deletions, substitutions and a swap of two
// neighbours each count one ('btach' is one edit from 'batch'). Case counts.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::size_t> d((n + 1) * (m + 1));
  auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * (m + 1) + j]; };
  for (std::size_t i = 0; i <= n; ++i) at(i, 0) = i;
  for (std::size_t j = 0; j <= m; ++j) at(0, j) = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
    }
  return at(n, m);
}

}  // namespace outpost::core
