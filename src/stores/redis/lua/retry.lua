-- ARGV: B, mode ('ids' or 'all'), limit (for 'all'), ids... Dead -> pending, attempts 0,
-- crashes 0.
local bad = layout_error()
if bad then return bad end
local ids = dead_targets()
local now = now_ms()
local n = 0
for _, id in ipairs(ids) do
  local seq = redis.call('ZSCORE', B .. 'v3:dead', id)
  if seq then
    redis.call('ZREM', B .. 'v3:dead', id)
    redis.call('ZADD', B .. 'v3:pending', now, id)
    redis.call('ZADD', B .. 'v3:live', seq, id)
    -- Later events of its key that are still undelivered link to it (or to one after it) and
    -- wait; when none is left, the key's next events chain behind it.
    local key = body_key(redis.call('HGET', B .. 'v3:body', id))
    if key and key ~= '' and not redis.call('HGET', B .. 'v3:tail', key) then
      redis.call('HSET', B .. 'v3:tail', key, id .. ' ' .. seq)
    end
    redis.call('HDEL', B .. 'v3:own', id)  -- attempts 0
    redis.call('HDEL', B .. 'v3:crashes', id)  -- crashes 0
    redis.call('HDEL', B .. 'v3:dead_at', id)
    redis.call('ZREM', B .. 'v3:died', id)
    n = n + 1
  end
end
if n > 0 then redis.call('PUBLISH', B .. 'wake', '1') end
return n
