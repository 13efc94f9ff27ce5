// Full-jitter exponential backoff (the AWS architecture blog's "full jitter": spreads retries of
// many failing events uniformly instead of in synchronized waves).

#include <random>

#include "outpost/relay.h"

namespace outpost {

Duration backoff_cap(int attempt, Duration base, Duration max) {
  if (base.count() <= 0 || max.count() <= 0) return Duration{0};
  if (attempt < 1) attempt = 1;
  const std::int64_t b = base.count();
  const std::int64_t m = max.count();
  const int shift = attempt - 1;
  // b * 2^shift > m  <=>  b > floor(m / 2^shift); avoids the overflow of computing the product.
  if (shift >= 62 || b > (m >> shift)) return max;
  return Duration{b << shift};
}

Duration backoff_delay(int attempt, Duration base, Duration max) {
  const Duration cap = backoff_cap(attempt, base, max);
  if (cap.count() <= 0) return Duration{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<std::int64_t> dist(0, cap.count());
  return Duration{dist(rng)};
}

}  // namespace outpost
