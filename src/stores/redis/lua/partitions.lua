-- ARGV: B (the outbox's own "{prefix}:"), partitions (the URL's count; 0: none given), create
-- ('1': record a count when none is), default (the count a URL without one records: 0 records
-- none, as on Redis Cluster). The outbox's partition count (docs/redis.md, Partitions): the
-- recorded one, or with create the URL's (or the default), recorded now. 1 is the unpartitioned
-- layout: recorded when a URL says partitions=1 (an explicit opt-out, which URLs without a
-- count then follow), and replaced by a URL's larger count once that layout holds no event. An
-- outbox whose unpartitioned key space still holds events (live or dead, any layout) gets no
-- larger count: -1, so they are delivered before the switch, never stranded. Returns the count
-- (0: none recorded and none created).
local cur = redis.call('GET', B .. 'partitions')
local want, create = tonumber(ARGV[2]), ARGV[3] == '1'
local function holds_events()
  return redis.call('EXISTS', B .. 'live', B .. 'dead') == 1 or
    redis.call('ZCARD', B .. 'v3:live') > 0 or redis.call('ZCARD', B .. 'v3:dead') > 0
end
if cur and not (cur == '1' and want > 1 and create) then return tonumber(cur) end
if not create then return 0 end
if want == 1 then
  redis.call('SET', B .. 'partitions', '1')
  return 1
end
if want == 0 then want = tonumber(ARGV[4]) end
if want <= 1 then return cur and tonumber(cur) or 0 end
if holds_events() then return cur and tonumber(cur) or -1 end
redis.call('SET', B .. 'partitions', want)
return want
