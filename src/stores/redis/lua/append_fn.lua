-- One key space's append (append.lua; append_many.lua runs it for several partitions in one
-- call). A is laid out like append.lua's ARGV; B is the key space's base when they run.
-- An event the relay could not read back (docs/emit-contract.md, Redis) is refused here, before
-- anything of the call is written, so a hand-written emitter sees the error in its EXEC reply
-- instead of a relay that stops on the event later: the id must be canonical lowercase UUID
-- text (acks and dead-lettering name the event by it) and the body four "<byte length>:"
-- fields (redis_body.h), the first being the key argument.
local uuid = '^' .. string.rep('[0-9a-f]', 8) .. '%-' .. string.rep('[0-9a-f]', 4) .. '%-' ..
  string.rep('[0-9a-f]', 4) .. '%-' .. string.rep('[0-9a-f]', 4) .. '%-' ..
  string.rep('[0-9a-f]', 12) .. '$'
local function field(s, pos)
  local colon = string.find(s, ':', pos, true)
  if not colon or colon == pos or string.find(string.sub(s, pos, colon - 1), '[^0-9]') then
    return nil
  end
  local len = tonumber(string.sub(s, pos, colon - 1))
  if colon + len > #s then return nil end
  return string.sub(s, colon + 1, colon + len), colon + len + 1
end
local function unreadable(id, key, body)
  if not string.find(id, uuid) then
    return 'event id ' .. id .. ' is not a UUID in canonical lowercase text'
  end
  local k, pos = field(body, 1)
  if k ~= key then return 'the body of event ' .. id .. ' does not start with its key' end
  local t, occurred, headers
  t, pos = field(body, pos)
  if t then occurred, pos = field(body, pos) end
  if occurred then headers, pos = field(body, pos) end
  if not headers or not string.find(occurred, '^%-?%d+$') then
    return 'the body of event ' .. id .. ' is not <len>:key <len>:type <len>:occurred_at ' ..
      '<len>:headers payload with byte lengths'
  end
  local hpos = 1
  while hpos <= #headers do
    local name, value
    name, hpos = field(headers, hpos)
    if name then value, hpos = field(headers, hpos) end
    if not value then return 'the headers of event ' .. id .. ' are not <len>:name<len>:value pairs' end
  end
  return nil
end
-- nil and the ids when A's events may be appended to B, else an error reply (nothing written).
-- `seen`: the ids of the call so far (a duplicate id rejects the whole call).
local function append_check(A, seen)
  local bad = layout_error()
  if bad then return bad end
  local ids = {}
  for i = 0, tonumber(A[2]) - 1 do
    local id = A[3 + i * 3]
    local why = unreadable(id, A[4 + i * 3], A[5 + i * 3])
    if why then return redis.error_reply('OUTPOST_UNREADABLE ' .. why .. ' (docs/emit-contract.md)') end
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
  return nil, ids
end
-- Writes A's events (checked by append_check: `ids`) at server time `now`; returns their count.
-- The caller publishes the wake.
local function append_write(A, ids, now)
  local n = #ids
  -- A crash count left behind by an older build's ack (it does not know B.."v3:crashes") must not
  -- carry over to an event that brings its id again.
  if redis.call('EXISTS', B .. 'v3:crashes') == 1 then bulk('HDEL', B .. 'v3:crashes', ids) end
  local last = redis.call('INCRBY', B .. 'seq', n)
  local first = last - n + 1
  -- Each keyed event links to its key's previous event (the tail, or one earlier in this call).
  local ukeys, tails = {}, {}
  for i = 0, n - 1 do
    local key = A[4 + i * 3]
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
    local id, key, seq = A[a], A[a + 1], first + i
    if key ~= '' then
      local q = tails[key]
      if q ~= '' then links[#links + 1] = id; links[#links + 1] = q end
      tails[key] = id .. ' ' .. seq
    end
    bodies[#bodies + 1] = id; bodies[#bodies + 1] = A[a + 2]
    local due = tonumber(A[3 + n * 3 + i] or '') or 0
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
  return n
end
