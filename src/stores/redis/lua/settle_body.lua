-- The settle_and_claim script: prologue.lua, ack_fn.lua, nack_fn.lua, release_fn.lua,
-- settle_fn.lua, claim_fn.lua, then this.
-- Store::settle_and_claim in one script: ack, nack, release (each fenced like the separate
-- scripts), then claim. ARGV: B, fence, owner (of the settled batch), archive (1/0),
-- retention_ms, n_acks, n_ack_keys, n_nacks, n_releases, then the claim's token, max, lease_ms,
-- ordered, new owner, scan_limit, writer_lease_ms, then n_acks ids and n_ack_keys keys (as for
-- ack), n_nacks triples (id, error, retry_ms), n_releases ids. Returns {acked, nacked, released,
-- <claim's reply>} (counts -1 when fenced off).
local bad = layout_error()
if bad then return bad end
local counts = settle(ARGV, 17)
local out = claim({B, ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14], ARGV[15], ARGV[16]})
local r = {counts[1], counts[2], counts[3]}
for j = 1, #out do r[#r + 1] = out[j] end
return r
