-- nack(A), A laid out like ARGV: B, fence, owner, then triples id, error, retry_ms (-1 = dead
-- now). Returns count or -1.
local function nack(A)
if not fence_ok(A[2]) then return -1 end
local owner = A[3]
local now, t = now_ms()
local dead_at = t[1] .. string.format('%06d', tonumber(t[2]))
local own = B .. 'v3:own'
local count = 0
for i = 4, #A, 3 do
  local id, err, retry = A[i], A[i + 1], tonumber(A[i + 2])
  local attempts, w = parse_own(redis.call('HGET', own, id))
  if w == owner then
    if retry < 0 then
      local seq = redis.call('ZSCORE', B .. 'v3:live', id) or '0'
      unlink_event(id)
      redis.call('ZADD', B .. 'v3:dead', seq, id)
      redis.call('HSET', B .. 'v3:dead_at', id, dead_at)
      redis.call('ZADD', B .. 'v3:died', now, id)  -- for dead_retention
    else
      redis.call('ZREM', B .. 'v3:leased', id)
      redis.call('ZADD', B .. 'v3:pending', now + retry, id)
    end
    redis.call('HSET', B .. 'v3:error', id, err)
    redis.call('HSET', own, id, attempts)  -- no longer leased
    count = count + 1
  end
end
return count
end
