-- release(A), A laid out like ARGV: B, fence, owner, ids... Back to pending, due now, attempt
-- not counted. Returns count or -1.
local function release(A)
if not fence_ok(A[2]) then return -1 end
local owner = A[3]
local now = now_ms()
local own = B .. 'v3:own'
local n = 0
for i = 4, #A do
  local id = A[i]
  local attempts, w = parse_own(redis.call('HGET', own, id))
  if w == owner then
    redis.call('ZREM', B .. 'v3:leased', id)
    redis.call('ZADD', B .. 'v3:pending', now, id)
    redis.call('HSET', own, id, math.max(0, attempts - 1))  -- the attempt does not count
    n = n + 1
  end
end
if n > 0 then redis.call('PUBLISH', B .. 'wake', '1') end
return n
end
