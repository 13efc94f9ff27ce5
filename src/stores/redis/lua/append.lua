-- ARGV: B, n, then per event: id, key, body; then, optionally, per event its due time (ms, the
-- server's clock; '' or 0: now): a scheduled event (Event::deliver_at) waits in pending with that
-- score, so a claim takes it once due and its key's later events wait behind it. Returns n.
-- Runs as EVALSHA on its own, or as EVAL queued inside the caller's MULTI.
-- A duplicate id (in the call, or of a live or dead event) rejects the whole call unwritten.
-- A partitioned outbox (B.."partitions" > 1, docs/redis.md, Partitions): each event goes to its
-- partition's key space {prefix:pK} (K = FNV-1a of the key mod the count; of the id for an
-- event without a key), all checked before any is written. One script
-- may do that on a single master only: on Redis Cluster it is refused, writing nothing.
local n = tonumber(ARGV[2])
local seen = {}
for i = 0, n - 1 do
  local id = ARGV[3 + i * 3]
  if seen[id] then return redis.error_reply('OUTPOST_DUPLICATE duplicate event id ' .. id) end
  seen[id] = true
end
-- The events ev (indices 0 .. n-1 into ARGV's triples) into B: nil, or an error reply when B's
-- layout is refused or one of them has the id of a live or dead event there.
local function check(ev)
  local bad = layout_error()
  if bad then return bad end
  local ids = {}
  for _, i in ipairs(ev) do ids[#ids + 1] = ARGV[3 + i * 3] end
  for _, z in ipairs({'v3:live', 'v3:dead'}) do
    local r = mget_all('ZMSCORE', B .. z, ids)
    for j = 1, #ids do
      if r[j] then return redis.error_reply('OUTPOST_DUPLICATE duplicate event id ' .. ids[j]) end
    end
  end
  return nil
end
-- Writes the events ev into B, in their order; `wake`: publishes B.."wake" (a routed call wakes
-- the relays once: they subscribe to every partition's channel). `seqs`: the events' sequence
-- numbers (a routed call numbers them from the outbox's own counter, so seqs follow emit order
-- across partitions), else from B's counter.
local function write(ev, wake, seqs)
  local m = #ev
  local ids = {}
  for _, i in ipairs(ev) do ids[#ids + 1] = ARGV[3 + i * 3] end
  -- A crash count left behind by an older build's ack (it does not know B.."v3:crashes") must
  -- not carry over to an event that brings its id again.
  if redis.call('EXISTS', B .. 'v3:crashes') == 1 then bulk('HDEL', B .. 'v3:crashes', ids) end
  local now = now_ms()
  if not seqs then
    local first = redis.call('INCRBY', B .. 'seq', m) - m + 1
    seqs = {}
    for x = 1, m do seqs[x] = first + x - 1 end
  end
  -- Each keyed event links to its key's previous event (the tail, or one earlier in this call).
  local ukeys, tails = {}, {}
  for _, i in ipairs(ev) do
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
  for x, i in ipairs(ev) do
    local a = 3 + i * 3
    local id, key, seq = ARGV[a], ARGV[a + 1], seqs[x]
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
  if wake then redis.call('PUBLISH', B .. 'wake', '1') end
end
local count = redis.call('GET', B .. 'partitions')
if not count or count == '1' then
  local all = {}
  for i = 0, n - 1 do all[#all + 1] = i end
  local bad = check(all)
  if bad then return bad end
  -- A partition's own call (B = {prefix:pK}:, docs/emit-contract.md) on a single master numbers
  -- its events from the outbox's counter too, as a routed call does, so seqs never go back
  -- within a partition; on Redis Cluster that key is in another slot (refused): its own counter.
  local seqs = nil
  local outbox = string.match(B, '^{(.+):p%d+}:$')
  if outbox then
    local last = redis.pcall('INCRBY', '{' .. outbox .. '}:seq', n)
    if type(last) == 'number' then
      seqs = {}
      for x = 1, n do seqs[x] = last - n + x end
    end
  end
  write(all, true, seqs)
  return n
end
-- Partitioned: FNV-1a (32 bit) of the key's bytes, exact in Lua's doubles (16777619 = 2^24 +
-- 403, so the product mod 2^32 is (h mod 2^8) * 2^24 + h * 403, both below 2^53).
local parts = tonumber(count)
local function partition(key)
  local h = 2166136261
  for c = 1, #key do
    h = bit.bxor(h, string.byte(key, c))
    if h < 0 then h = h + 4294967296 end
    h = ((h % 256) * 16777216 + h * 403) % 4294967296
  end
  return h % parts
end
local own, outbox = B, string.sub(B, 2, #B - 2)
local groups, order = {}, {}
for i = 0, n - 1 do
  local key = ARGV[4 + i * 3]
  -- An event without a key by its id: spread, and an id brought twice meets itself.
  local k = partition(key ~= '' and key or ARGV[3 + i * 3])
  if not groups[k] then
    groups[k] = {}
    order[#order + 1] = k
  end
  local g = groups[k]
  g[#g + 1] = i
end
for _, k in ipairs(order) do
  B = '{' .. outbox .. ':p' .. k .. '}:'
  local ok = redis.pcall('EXISTS', B .. 'seq')
  if type(ok) == 'table' and ok.err then
    return redis.error_reply('OUTPOST_PARTITIONS the outbox {' .. outbox .. '} is partitioned (' ..
      count .. ' partitions) and its partitions are in other slots of this Redis Cluster: ' ..
      'append each event to its partition {' .. outbox .. ':pK}, K = FNV-1a(key) mod ' .. count ..
      ' (docs/redis.md, Partitions)')
  end
  local bad = check(groups[k])
  if bad then return bad end
end
local first = redis.call('INCRBY', own .. 'seq', n) - n + 1
for x, k in ipairs(order) do
  local seqs = {}
  for _, i in ipairs(groups[k]) do seqs[#seqs + 1] = first + i end
  B = '{' .. outbox .. ':p' .. k .. '}:'
  write(groups[k], x == #order, seqs)
end
return n
