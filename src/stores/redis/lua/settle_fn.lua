-- settle(A, k): the settlement of one finished batch, ack, nack, then release, each fenced
-- exactly like the separate scripts (ack_fn.lua, nack_fn.lua, release_fn.lua): used by the
-- settle_and_claim script (settle_body.lua) and by the partitioned one (settle_many.lua). A:
-- B, fence, owner (of the settled batch), archive (1/0), retention_ms, n_acks, n_ack_keys,
-- n_nacks, n_releases; from A[k] on: n_acks ids and n_ack_keys keys (as for ack), n_nacks
-- triples (id, error, retry_ms), n_releases ids. Returns {acked, nacked, released} (-1 each
-- when fenced off).
local function settle(A, k)
local fence, owner = A[2], A[3]
local na, nk = tonumber(A[6]), tonumber(A[7])
local nn, nr = tonumber(A[8]), tonumber(A[9])
local counts = {0, 0, 0}
if na > 0 then counts[1] = ack(fence, owner, A[4] == '1', A[5], A, k, na, k + na, nk) end
k = k + na + nk
if nn > 0 then
  local a = {B, fence, owner}
  for j = k, k + nn * 3 - 1 do a[#a + 1] = A[j] end
  counts[2] = nack(a)
end
k = k + nn * 3
if nr > 0 then
  local a = {B, fence, owner}
  for j = k, k + nr - 1 do a[#a + 1] = A[j] end
  counts[3] = release(a)
end
return counts
end
