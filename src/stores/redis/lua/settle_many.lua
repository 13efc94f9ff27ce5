-- The partitioned store's one script on a single master (prologue.lua, ack_fn.lua, nack_fn.lua,
-- release_fn.lua, settle_fn.lua, claim_fn.lua, then this; redis_partitioned.cpp): settles the parts of a batch
-- in their partitions, then claims from the given partitions in turn until `max` events are
-- taken, so one round trip serves every partition a relay owns (docs/redis.md, Partitions). The
-- functions read B, the key base, when they run: it is set to each partition's base in turn, and
-- every settlement and claim is fenced by that partition's own writer lease exactly as in
-- settle_body.lua and claim_body.lua. Not on Redis Cluster: the partitions are in other slots.
-- ARGV: B (the outbox's own base), n_settles, n_claims, max; then n_settles parts, each its
-- length L and L arguments laid out like settle_body.lua's ARGV without the claim's (B of the
-- partition, fence, owner, archive, retention_ms, n_acks, n_ack_keys, n_nacks, n_releases, then
-- the ids, keys, nack triples and release ids); then n_claims claims of 8 arguments each, laid
-- out like claim_fn.lua's A (its max is replaced by what is still missing).
-- Returns {{acked, nacked, released} per settled part..., then the claim reply of each partition
-- asked, in the given order: the partitions after the one that filled the batch are not asked}.
-- A partition whose settlement or claim fails (a broken key, OOM) has an error reply in its
-- place and the others go on, as when each partition is its own call.
local ns, nc, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local parts, i = {}, 5
for s = 1, ns do
  local L = tonumber(ARGV[i])
  local A = {}
  for j = i + 1, i + L do A[#A + 1] = ARGV[j] end
  parts[s] = A
  i = i + 1 + L
end
local c0 = i
-- Every partition's layout first (once each: a partition usually both settles and claims), so
-- a refused outbox is left as it was everywhere.
local checked = {}
local function check(base)
  if checked[base] then return nil end
  checked[base] = true
  B = base
  return layout_error()
end
for s = 1, ns do
  local bad = check(parts[s][1])
  if bad then return bad end
end
for c = 0, nc - 1 do
  local bad = check(ARGV[c0 + c * 8])
  if bad then return bad end
end
-- fn(...) or its error as an error reply in the result.
local function guarded(fn, ...)
  local ok, r = pcall(fn, ...)
  if ok then return r end
  return redis.error_reply(type(r) == 'table' and (r.err or '?') or tostring(r))
end
local out = {}
for s = 1, ns do
  B = parts[s][1]
  out[#out + 1] = guarded(settle, parts[s], 10)
end
local got = 0
for c = 0, nc - 1 do
  if got >= max then break end
  local a = c0 + c * 8
  B = ARGV[a]
  local r = guarded(claim, {B, ARGV[a + 1], tostring(max - got), ARGV[a + 3], ARGV[a + 4],
    ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]})
  out[#out + 1] = r
  if not r.err and r[1] ~= -1 then got = got + (#r - 2) / 6 end
end
return out
