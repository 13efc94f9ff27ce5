-- claim(A), A laid out like ARGV: B, token ('' = no writer lease), max, lease_ms, order (0
-- unordered, 1 ordered, 2 strict: a dead letter holds its key's later events back too),
-- owner, scan_limit, writer_lease_ms.
-- Returns {fence, hint_ms, id, body, seq, attempts, crashes, deliver_at, ...}; deliver_at: ms
-- (B.."v3:at"), 0 = not scheduled.
-- fence -1: the writer lease is held by another Store (hint = its remaining ms).
-- hint_ms: when nothing was claimed, ms until the next retry is due or lease expires (-1: none).
-- Ordered: events in due-time (then emit) order, each taken only after its key's previous event
-- (see "tail" in redis_scripts.h). Every read and write of a batch's events is one bulk command.
local function claim(A)
local token, max, lease = A[2], tonumber(A[3]), tonumber(A[4])
local ordered, strict, owner, scan_limit = A[5] ~= '0', A[5] == '2', A[6], tonumber(A[7])
local writer_ms = tonumber(A[8])
local now = now_ms()
local pending, leased = B .. 'v3:pending', B .. 'v3:leased'
local fence = 0
if token ~= '' then
  local lock = B .. 'lock'
  local cur = redis.call('GET', lock)
  if not cur then
    local w = redis.call('HMGET', B .. 'writer', 'owner', 'fence')
    fence = tonumber(w[2]) or 0
    if w[1] ~= token then
      fence = redis.call('HINCRBY', B .. 'writer', 'fence', 1)
      -- moved_at: since when the new holder has it (`outpost partitions`)
      redis.call('HSET', B .. 'writer', 'owner', token, 'moved_at', now)
    end
    redis.call('SET', lock, token, 'PX', writer_ms)
  elseif cur == token then
    if redis.call('PTTL', lock) < writer_ms then redis.call('PEXPIRE', lock, writer_ms) end
    fence = tonumber(redis.call('HGET', B .. 'writer', 'fence'))
  else
    return {-1, redis.call('PTTL', lock)}
  end
end
-- Recover expired leases (bounded per call; the key walk below also takes expired ones).
local expired = redis.call('ZRANGEBYSCORE', leased, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1000)
for i = 1, #expired, 2 do
  redis.call('ZREM', leased, expired[i])
  redis.call('ZADD', pending, expired[i + 1], expired[i])
end
local picked, taken = {}, {}
local function take(id)
  picked[#picked + 1] = id; taken[id] = true
end
-- Predecessor links ('' = none): read for a whole scan window with one HMGET, else one by one
-- (a chain walk back from a late-scanned event).
local links = {}
local function read_links(w)
  local need = {}
  for _, id in ipairs(w) do
    if links[id] == nil then need[#need + 1] = id end
  end
  if #need == 0 then return end
  local r = hmget_all(B .. 'v3:link', need)
  for j, id in ipairs(need) do links[id] = r[j] or '' end
end
local function link_of(id)
  local q = links[id]
  if q == nil then
    q = redis.call('HGET', B .. 'v3:link', id) or ''
    links[id] = q
  end
  return q
end
-- Ordered mode: an event is taken when it has no predecessor, or its predecessor is taken by
-- this claim (earlier in scan order), or is no longer live (live score = its seq; a different
-- score is a later event that reused the id). One ZMSCORE per window checks the predecessors.
-- A live predecessor scanned later (a recovered lease or a retry scores later than the events
-- behind it) is taken first with its own due predecessors, as the key's run in order.
local blocked = {}
local function due(id)
  local s = redis.call('ZSCORE', pending, id) or redis.call('ZSCORE', leased, id)
  return s and tonumber(s) <= now
end
local function take_chain(id, pid, pseq)
  local chain = {}
  local room = max - #picked - 1
  while not taken[pid] do
    local s = redis.call('ZSCORE', B .. 'v3:live', pid)
    local dead_head = false
    if not s or tonumber(s) ~= pseq then  -- delivered or dead: the chain ends
      if not strict then break end
      local d = redis.call('ZSCORE', B .. 'v3:dead', pid)
      if not d or tonumber(d) ~= pseq then break end
      dead_head = true  -- strict: the key waits behind its dead letter
    end
    if dead_head or blocked[pid] or #chain >= room or not due(pid) then
      blocked[id] = true
      for _, c in ipairs(chain) do blocked[c] = true end
      return
    end
    chain[#chain + 1] = pid
    local q = link_of(pid)
    if q == '' then break end
    local p2, s2 = split_link(q)
    pid, pseq = p2, tonumber(s2)
  end
  for x = #chain, 1, -1 do take(chain[x]) end
  take(id)
end
local function take_window(w)
  if not ordered then
    for _, id in ipairs(w) do take(id) end
    return
  end
  read_links(w)
  local pl, ask = {}, {}
  for j, id in ipairs(w) do
    local q = links[id]
    if q ~= '' then
      local pid, pseq = split_link(q)
      pl[j] = {pid, tonumber(pseq)}
      if not taken[pid] then ask[#ask + 1] = pid end
    end
  end
  local scores, is_due, dead = {}, {}, {}
  if strict and #ask > 0 then
    local d = mget_all('ZMSCORE', B .. 'v3:dead', ask)
    for j, pid in ipairs(ask) do dead[pid] = d[j] end
  end
  if #ask > 0 then
    local r = mget_all('ZMSCORE', B .. 'v3:live', ask)
    local alive = {}
    for j, pid in ipairs(ask) do
      scores[pid] = r[j]
      if r[j] then alive[#alive + 1] = pid end
    end
    -- Whether each live predecessor is due (pending and due, or its lease expired), batched:
    -- usually it is in flight in another batch, and its successor is blocked at no extra cost.
    if #alive > 0 then
      local rp = mget_all('ZMSCORE', pending, alive)
      local rl = mget_all('ZMSCORE', leased, alive)
      for j, pid in ipairs(alive) do
        local sc = rp[j] or rl[j]
        is_due[pid] = sc and tonumber(sc) <= now
      end
    end
  end
  for j, id in ipairs(w) do
    if #picked >= max then return end
    local l = pl[j]
    if taken[id] or blocked[id] then  -- taken with a chain above, or behind a blocked one
    elseif l and not taken[l[1]] and dead[l[1]] and tonumber(dead[l[1]]) == l[2] then
      blocked[id] = true  -- strict: its predecessor is a dead letter
    elseif not l or taken[l[1]] or not scores[l[1]] or tonumber(scores[l[1]]) ~= l[2] then
      take(id)
    elseif blocked[l[1]] or not is_due[l[1]] then
      blocked[id] = true
      blocked[l[1]] = true
    else
      take_chain(id, l[1], l[2])
    end
  end
end
local chunk = math.max(64, max * 2)
local offset = 0
while #picked < max and offset < scan_limit do
  local ids = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'LIMIT', offset, chunk)
  local i = 1
  while i <= #ids and #picked < max do
    -- As many scanned events as there is room for, so that few are read in vain.
    local w = {}
    while i <= #ids and #w < max - #picked do
      if not taken[ids[i]] then w[#w + 1] = ids[i] end
      i = i + 1
    end
    take_window(w)
  end
  if #ids < chunk then break end
  offset = offset + chunk
end
local out = {fence, -1}
-- An event without a body (removed by hand, or a bug) cannot be delivered, and leasing it would
-- make every claim fail on it: it goes to the dead letters with the reason instead, its key's
-- later events go on, and `events dead` shows it. The rest of the batch is claimed as usual.
local bodies = {}
if #picked > 0 then
  local all = hmget_all(B .. 'v3:body', picked)
  local kept, lost = {}, {}
  for i, id in ipairs(picked) do
    if all[i] then
      kept[#kept + 1] = id; bodies[#bodies + 1] = all[i]
    else
      lost[#lost + 1] = id
    end
  end
  if #lost > 0 then
    local _, t = now_ms()
    local dead_at = t[1] .. string.format('%06d', tonumber(t[2]))
    local seqs = mget_all('ZMSCORE', B .. 'v3:live', lost)
    for j, id in ipairs(lost) do
      redis.call('ZREM', pending, id)
      redis.call('ZREM', leased, id)
      redis.call('ZREM', B .. 'v3:live', id)
      redis.call('ZADD', B .. 'v3:dead', seqs[j] or 0, id)
      redis.call('HSET', B .. 'v3:error', id, 'the event has no body in ' .. B .. 'v3:body')
      redis.call('HSET', B .. 'v3:dead_at', id, dead_at)
      redis.call('ZADD', B .. 'v3:died', now, id)
    end
    picked = kept
    if #picked == 0 then
      out[2] = 0  -- more may be claimable at once
      return out
    end
  end
end
if #picked == 0 then
  local p = redis.call('ZRANGEBYSCORE', pending, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local l = redis.call('ZRANGE', leased, 0, 0, 'WITHSCORES')
  local next_at = nil
  if #p > 0 then next_at = tonumber(p[2]) end
  if #l > 0 and (not next_at or tonumber(l[2]) < next_at) then next_at = tonumber(l[2]) end
  if next_at then out[2] = math.max(0, next_at - now) end
  return out
end
local until_ms = now + lease
local lz = {}
for _, id in ipairs(picked) do
  lz[#lz + 1] = until_ms; lz[#lz + 1] = id
end
bulk('ZREM', pending, picked)
bulk('ZADD', leased, lz)
local owns = hmget_all(B .. 'v3:own', picked)
local seqs = mget_all('ZMSCORE', B .. 'v3:live', picked)
-- An event still owned by an earlier claim (ack, nack and release clear the owner) is one whose
-- lease expired with no outcome recorded: that claim's attempt stays the one in flight and this
-- claim counts a crash (store.h). Crash counts are read only when some event has one (no
-- B.."v3:crashes" hash: none has) or this claim counts one.
local attempts, expired, any_expired = {}, {}, false
for i = 1, #picked do
  local n, w = parse_own(owns[i])
  attempts[i], expired[i] = n, w ~= nil
  any_expired = any_expired or expired[i]
end
local crashes_key, at_key = B .. 'v3:crashes', B .. 'v3:at'
-- Which of the two exist, in one call when neither or both do (usually neither).
local has_crashes, has_at = false, false
local n_extra = redis.call('EXISTS', crashes_key, at_key)
if n_extra == 2 then
  has_crashes, has_at = true, true
elseif n_extra == 1 then
  has_at = redis.call('EXISTS', at_key) == 1
  has_crashes = not has_at
end
local crs = nil
if any_expired or has_crashes then crs = hmget_all(crashes_key, picked) end
-- deliver_at comes back with the event (the event JSON's "deliver_at" reaches sinks and
-- handlers, docs/redis.md): read only when some live or dead event is scheduled.
local ats = nil
if has_at then ats = mget_all('ZMSCORE', at_key, picked) end
local set, cset = {}, {}
for i, id in ipairs(picked) do
  local n = attempts[i]
  local c = crs and tonumber(crs[i] or 0) or 0
  if expired[i] then
    c = c + 1
    cset[#cset + 1] = id; cset[#cset + 1] = c
  else
    n = n + 1
  end
  set[#set + 1] = id; set[#set + 1] = n .. ' ' .. owner
  out[#out + 1] = id
  out[#out + 1] = bodies[i]
  out[#out + 1] = seqs[i] or '0'
  out[#out + 1] = n
  out[#out + 1] = c
  out[#out + 1] = ats and tonumber(ats[i] or 0) or 0
end
bulk('HSET', B .. 'v3:own', set)
bulk('HSET', crashes_key, cset)
return out
end
