-- ARGV: B, token, fence, owner, lease_ms, writer_lease_ms, ids... Returns 1 (held) or 0 (lost).
-- The writer lease as in heartbeat.lua, then the events' leases.
local token, fence, owner, lease = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
if token ~= '' and not keep_writer_lease(token, fence, tonumber(ARGV[6])) then return 0 end
local now = now_ms()
local held = 1
for i = 7, #ARGV do
  local id = ARGV[i]
  local _, w = parse_own(redis.call('HGET', B .. 'v3:own', id))
  if w == owner then
    redis.call('ZREM', B .. 'v3:pending', id)
    redis.call('ZADD', B .. 'v3:leased', now + lease, id)
  elseif w then
    held = 0
  end
end
return held
