-- ARGV: B, mode ('ids' or 'all'), limit, ids... Dead -> deleted.
local bad = layout_error()
if bad then return bad end
local ids = dead_targets()
local n = 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', B .. 'v3:dead', id) == 1 then
    for _, h in ipairs({'v3:body', 'v3:own', 'v3:link', 'v3:error', 'v3:dead_at', 'v3:crashes'}) do
      redis.call('HDEL', B .. h, id)
    end
    redis.call('ZREM', B .. 'v3:at', id)
    n = n + 1
  end
end
return n
