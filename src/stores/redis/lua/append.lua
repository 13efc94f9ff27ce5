-- ARGV: B, n, then per event: id, key, body; then, optionally, per event its due time (ms, the
-- server's clock; '' or 0: now): a scheduled event (Event::deliver_at) waits in pending with that
-- score, so a claim takes it once due and its key's later events wait behind it. Returns n.
-- Runs as EVALSHA on its own, or as EVAL queued inside the caller's MULTI.
-- A duplicate id (in the call, or of a live or dead event) rejects the whole call unwritten.
local bad = layout_error()
if bad then return bad end
local n = tonumber(ARGV[2])
local ids, seen = {}, {}
for i = 0, n - 1 do
  local id = ARGV[3 + i * 3]
  if seen[id] then return redis.error_reply('OUTPOST_DUPLICATE duplicate event id ' .. id) end
  seen[id] = true
  ids[#ids + 1] = id
end
for _, z in ipairs({'v3:live', 'v3:dead'}) do
  local r = mget_all('ZMSCORE', B .. z, ids)
  for j = 1, #ids do
    if r[j] then return redis.error_reply('OUTPOST_DUPLICATE duplicate event id ' .. ids[j]) end
  end
end
-- A crash count left behind by an older build's ack (it does not know B.."v3:crashes") must not
-- carry over to an event that brings its id again.
if redis.call('EXISTS', B .. 'v3:crashes') == 1 then bulk('HDEL', B .. 'v3:crashes', ids) end
local now = now_ms()
local last = redis.call('INCRBY', B .. 'seq', n)
local first = last - n + 1
-- Each keyed event links to its key's previous event (the tail, or one earlier in this call).
local ukeys, tails = {}, {}
for i = 0, n - 1 do
  local key = ARGV[4 + i * 3]
  if key ~= '' and tails[key] == nil then
    tails[key] = ''
    ukeys[#ukeys + 1] = key
  end
end
if #ukeys > 0 then
  local cur = hmget_all(B .. 'v3:tail', ukeys)
  for j, k in ipairs(ukeys) do tails[k] = cur[j] or '' end
end
local bodies, pend, live, links, at = {}, {}, {}, {}, {}
for i = 0, n - 1 do
  local a = 3 + i * 3
  local id, key, seq = ARGV[a], ARGV[a + 1], first + i
  if key ~= '' then
    local q = tails[key]
    if q ~= '' then links[#links + 1] = id; links[#links + 1] = q end
    tails[key] = id .. ' ' .. seq
  end
  bodies[#bodies + 1] = id; bodies[#bodies + 1] = ARGV[a + 2]
  local due = tonumber(ARGV[3 + n * 3 + i] or '') or 0
  pend[#pend + 1] = math.max(due, now); pend[#pend + 1] = id
  if due > 0 then at[#at + 1] = due; at[#at + 1] = id end
  live[#live + 1] = seq; live[#live + 1] = id
end
bulk('HSET', B .. 'v3:body', bodies)
bulk('ZADD', B .. 'v3:pending', pend)
bulk('ZADD', B .. 'v3:live', live)
bulk('HSET', B .. 'v3:link', links)
bulk('ZADD', B .. 'v3:at', at)
if #ukeys > 0 then
  local set = {}
  for _, k in ipairs(ukeys) do set[#set + 1] = k; set[#set + 1] = tails[k] end
  bulk('HSET', B .. 'v3:tail', set)
end
redis.call('PUBLISH', B .. 'wake', '1')
return n
