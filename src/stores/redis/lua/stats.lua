-- ARGV: B. Returns {pending, leased, dead, archived, now_s, now_us, oldest body or '', scheduled}.
-- scheduled: live events whose deliver_at is still ahead (not counted in pending).
local bad = layout_error()
if bad then return bad end
local now, t = now_ms()
local due_leased = redis.call('ZCOUNT', B .. 'v3:leased', '-inf', now)
local scheduled = redis.call('ZCOUNT', B .. 'v3:at', '(' .. now, '+inf')
local pending = redis.call('ZCARD', B .. 'v3:pending') + due_leased - scheduled
local leased = redis.call('ZCARD', B .. 'v3:leased') - due_leased
local oldest = ''
local first = redis.call('ZRANGE', B .. 'v3:live', 0, 0)
if #first > 0 then oldest = redis.call('HGET', B .. 'v3:body', first[1]) or '' end
return {pending, leased, redis.call('ZCARD', B .. 'v3:dead'), redis.call('ZCARD', B .. 'v3:archive'),
        t[1], t[2], oldest, scheduled}
