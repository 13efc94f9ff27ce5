-- ARGV: B. Returns {pending, leased, dead, archived, now_s, now_us, oldest body or '', scheduled}.
-- scheduled: live events whose deliver_at is still ahead (not counted in pending, nor as the oldest).
local bad = layout_error()
if bad then return bad end
local now, t = now_ms()
local due_leased = redis.call('ZCOUNT', B .. 'v3:leased', '-inf', now)
local scheduled = redis.call('ZCOUNT', B .. 'v3:at', '(' .. now, '+inf')
local pending = redis.call('ZCARD', B .. 'v3:pending') + due_leased - scheduled
local leased = redis.call('ZCARD', B .. 'v3:leased') - due_leased
-- The oldest live event that is not scheduled (an event scheduled for tomorrow is not a stuck
-- one), as the other stores count it: live in seq order, past the events whose deliver_at is
-- still ahead. Every window but the last holds only such events, so this reads about scheduled + 1
-- ids (one when none is scheduled).
local oldest = ''
local found = nil
local i = 0
local w = scheduled > 0 and math.min(scheduled + 1, 100) or 1
while not found do
  local ids = redis.call('ZRANGE', B .. 'v3:live', i, i + w - 1)
  if #ids == 0 then break end
  local at = {}
  if scheduled > 0 then at = redis.call('ZMSCORE', B .. 'v3:at', unpack(ids)) end
  for j = 1, #ids do
    if not (at[j] and tonumber(at[j]) > now) then
      found = ids[j]
      break
    end
  end
  i = i + w
end
if found then oldest = redis.call('HGET', B .. 'v3:body', found) or '' end
return {pending, leased, redis.call('ZCARD', B .. 'v3:dead'), redis.call('ZCARD', B .. 'v3:archive'),
        t[1], t[2], oldest, scheduled}
