-- The settle_and_claim script: prologue.lua, ack_fn.lua, nack_fn.lua, release_fn.lua,
-- claim_fn.lua, then this.
-- Store::settle_and_claim in one script: ack, nack, release (each fenced like the separate
-- scripts), then claim. ARGV: B, fence, owner (of the settled batch), archive (1/0),
-- retention_ms, n_acks, n_ack_keys, n_nacks, n_releases, then the claim's token, max, lease_ms,
-- ordered, new owner, scan_limit, writer_lease_ms, then n_acks ids and n_ack_keys keys (as for
-- ack), n_nacks triples (id, error, retry_ms), n_releases ids. Returns {acked, nacked, released,
-- <claim's reply>} (counts -1 when fenced off).
local bad = layout_error()
if bad then return bad end
local fence, owner = ARGV[2], ARGV[3]
local na, nk = tonumber(ARGV[6]), tonumber(ARGV[7])
local nn, nr = tonumber(ARGV[8]), tonumber(ARGV[9])
local i = 17
local counts = {0, 0, 0}
if na > 0 then
  counts[1] = ack(fence, owner, ARGV[4] == '1', ARGV[5], ARGV, i, na, i + na, nk)
end
i = i + na + nk
if nn > 0 then
  local a = {B, fence, owner}
  for j = i, i + nn * 3 - 1 do a[#a + 1] = ARGV[j] end
  counts[2] = nack(a)
end
i = i + nn * 3
if nr > 0 then
  local a = {B, fence, owner}
  for j = i, i + nr - 1 do a[#a + 1] = ARGV[j] end
  counts[3] = release(a)
end
local out = claim({B, ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14], ARGV[15], ARGV[16]})
local r = {counts[1], counts[2], counts[3]}
for j = 1, #out do r[#r + 1] = out[j] end
return r
