#pragma once
// The Lua scripts of the Redis store. Every script gets KEYS[1] = a key of the outbox (so
// Redis Cluster routes it to the slot of `{prefix}`) and ARGV[1] = the key base "{prefix}:";
// the other keys are built from the base and all hash to the same slot.
//
// Keys (B = "{prefix}:"), layout 3. Its own names ("v3:") for everything an older layout also
// had, so a relay of an older build on the same prefix sees an empty outbox and can never
// consume (and deliver empty) an event of this one; shared with older layouts are only seq,
// lock, writer and wake (one writer at a time, whichever build it is).
//   B.."seq"           INCR sequence (emit order)
//   B.."v3:body"       hash id -> the event's body, packed by the client (redis_body.h): key,
//                      type, occurred_at, headers, payload. One hash, so an emit writes all of a
//                      call's bodies with one HSET and a claim reads a batch's with one HMGET:
//                      a per-event command inside a script costs more than the command's work
//   B.."v3:link"       hash id -> predecessor "<id> <seq>": the key's last undelivered event
//                      when this one was appended (no field = none)
//   B.."v3:error"      hash id -> last delivery error
//   B.."v3:dead_at"    hash id -> when it was dead-lettered (us)
//   B.."v3:own"        hash id -> "<attempts>" or "<attempts> <lease owner>" while leased (no
//                      field = 0 attempts): a claim writes and an ack reads the owners of a
//                      whole batch with one HSET / HMGET
//   B.."v3:pending"    zset id -> due time (ms, server clock)
//   B.."v3:leased"     zset id -> lease expiry (ms)
//   B.."v3:live"       zset id -> seq of every undelivered event (list order, oldest; the seq a
//                      claim returns)
//   B.."v3:dead"       zset id -> seq
//   B.."v3:archive"    zset id -> ack time (ms); B.."v3:archived" hash id -> body (archiving on)
//   B.."v3:tail"       hash key -> "<id> <seq>" of the key's last appended undelivered event
//                      (ordered mode: each event links to its predecessor of the same key, and
//                      is claimable once that one is no longer live (acked, dead, discarded) or
//                      is taken by the same claim; links, unlike a zset per key, cost no command
//                      per event: the tail hash is read and written once per append and per ack)
//   B.."lock"          writer lease: the holder's token, PX = writer_lease_ms (renewed by a
//                      heartbeat, so a crashed holder's standby takes over after that, whatever
//                      the event lease)
//   B.."writer"        hash: owner (last holder's token), fence (incremented when the holder
//                      changes)
//   B.."wake"          pub/sub channel published on emit and retry
// An older layout's events live in B.."live" / B.."dead" (no "v3:"): while either exists the
// scripts refuse (layout_error), so those events are neither misread nor left waiting unseen.

namespace outpost::redis_store {

// Shared prologue: server time, the layout check, the writer fence check, bulk helpers.
inline constexpr const char* kPrologue = R"lua(
local B = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end
-- nil, or an error reply when the prefix still holds events of an older layout (its `live` or
-- `dead` sorted set, names layout 3 does not use): this build must neither read them as its own
-- nor let them wait unseen, so it refuses until the older build has delivered or discarded them.
local function layout_error()
  if redis.call('EXISTS', B .. 'live', B .. 'dead') == 0 then return nil end
  return redis.error_reply('OUTPOST_LAYOUT the outbox ' .. B .. ' holds events written by an ' ..
    'older outpost (layout 2; this build uses layout 3): let that build deliver or discard ' ..
    'them first (docs/redis.md, Layout)')
end
local function fence_ok(fence)
  if fence == '0' then return true end
  return redis.call('HGET', B .. 'writer', 'fence') == fence
end
-- Compare-and-renew of the writer lease for `ms`: ours -> extended; expired and nobody took it
-- since (fence unchanged) -> taken back; anything else -> lost (false).
local function keep_writer_lease(token, fence, ms)
  local lock = B .. 'lock'
  local cur = redis.call('GET', lock)
  if cur == token then
    if redis.call('PTTL', lock) < ms then redis.call('PEXPIRE', lock, ms) end
  elseif not cur and fence_ok(fence) then
    redis.call('SET', lock, token, 'PX', ms)
  else
    return false
  end
  return fence_ok(fence)
end
-- Runs `cmd key <items...>` in chunks (Lua's unpack has a limit; 1000 keeps ZADD/HSET pairs
-- whole). Returns the sum of integer replies.
local function bulk(cmd, key, items)
  local sum = 0
  for i = 1, #items, 1000 do
    local r
    if key then
      r = redis.call(cmd, key, unpack(items, i, math.min(i + 999, #items)))
    else
      r = redis.call(cmd, unpack(items, i, math.min(i + 999, #items)))
    end
    if type(r) == 'number' then sum = sum + r end
  end
  return sum
end
-- `cmd key items...` (HMGET, ZMSCORE) in chunks; the values in order (false = missing).
local function mget_all(cmd, key, items)
  local out = {}
  for i = 1, #items, 1000 do
    local r = redis.call(cmd, key, unpack(items, i, math.min(i + 999, #items)))
    for j = 1, #r do out[#out + 1] = r[j] end
  end
  return out
end
local function hmget_all(key, items) return mget_all('HMGET', key, items) end
-- The event key packed first into a body ("<len>:<key>..."); nil for no body.
local function body_key(b)
  if not b then return nil end
  local c = string.find(b, ':', 1, true)
  if not c then return nil end
  return string.sub(b, c + 1, c + tonumber(string.sub(b, 1, c - 1)))
end
-- An B.."own" value: attempts, lease owner (nil when not leased).
local function parse_own(v)
  if not v then return 0, nil end
  local sp = string.find(v, ' ', 1, true)
  if not sp then return tonumber(v), nil end
  return tonumber(string.sub(v, 1, sp - 1)), string.sub(v, sp + 1)
end
-- "<id> <seq>" -> id, seq (strings).
local function split_link(v)
  local sp = string.find(v, ' ', 1, true)
  if not sp then return v, '' end
  return string.sub(v, 1, sp - 1), string.sub(v, sp + 1)
end
-- Drops the tail entries of `keys` that still name one of the events in the set ids[j] of
-- keys[j] (delivered or dead: the key's next event starts a new chain).
local function drop_tails(keys, ids)
  if #keys == 0 then return end
  local cur = hmget_all(B .. 'v3:tail', keys)
  local del = {}
  for j, k in ipairs(keys) do
    if cur[j] and ids[j][split_link(cur[j])] then del[#del + 1] = k end
  end
  bulk('HDEL', B .. 'v3:tail', del)
end
local function unlink_event(id, key)
  -- Usually leased; back in pending only after a lease recovery.
  if redis.call('ZREM', B .. 'v3:leased', id) == 0 then redis.call('ZREM', B .. 'v3:pending', id) end
  redis.call('ZREM', B .. 'v3:live', id)
  if key and key ~= '' then drop_tails({key}, {{[id] = true}}) end
end
)lua";

// ARGV: B, n, then per event: id, key, body. Returns n.
// Runs as EVALSHA on its own, or as EVAL queued inside the caller's MULTI.
// A duplicate id (in the call, or of a live or dead event) rejects the whole call unwritten.
inline constexpr const char* kAppend = R"lua(
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
local bodies, pend, live, links = {}, {}, {}, {}
for i = 0, n - 1 do
  local a = 3 + i * 3
  local id, key, seq = ARGV[a], ARGV[a + 1], first + i
  if key ~= '' then
    local q = tails[key]
    if q ~= '' then links[#links + 1] = id; links[#links + 1] = q end
    tails[key] = id .. ' ' .. seq
  end
  bodies[#bodies + 1] = id; bodies[#bodies + 1] = ARGV[a + 2]
  pend[#pend + 1] = now; pend[#pend + 1] = id
  live[#live + 1] = seq; live[#live + 1] = id
end
bulk('HSET', B .. 'v3:body', bodies)
bulk('ZADD', B .. 'v3:pending', pend)
bulk('ZADD', B .. 'v3:live', live)
bulk('HSET', B .. 'v3:link', links)
if #ukeys > 0 then
  local set = {}
  for _, k in ipairs(ukeys) do set[#set + 1] = k; set[#set + 1] = tails[k] end
  bulk('HSET', B .. 'v3:tail', set)
end
redis.call('PUBLISH', B .. 'wake', '1')
return n
)lua";

// claim(A), A laid out like ARGV: B, token ('' = no writer lease), max, lease_ms, ordered (1/0),
// owner, scan_limit, writer_lease_ms.
// Returns {fence, hint_ms, id, body, seq, attempts, ...}.
// fence -1: the writer lease is held by another Store (hint = its remaining ms).
// hint_ms: when nothing was claimed, ms until the next retry is due or lease expires (-1: none).
// Ordered: events in due-time (then emit) order, each taken only after its key's previous event
// (see "tail" above). Every read and write of a batch's events is one bulk command.
inline constexpr const char* kClaimFn = R"lua(
local function claim(A)
local token, max, lease = A[2], tonumber(A[3]), tonumber(A[4])
local ordered, owner, scan_limit = A[5] == '1', A[6], tonumber(A[7])
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
      redis.call('HSET', B .. 'writer', 'owner', token)
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
    if not s or tonumber(s) ~= pseq then break end  -- delivered or dead: the chain ends
    if blocked[pid] or #chain >= room or not due(pid) then
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
  local scores, is_due = {}, {}
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
local set = {}
for i, id in ipairs(picked) do
  local n = parse_own(owns[i]) + 1
  set[#set + 1] = id; set[#set + 1] = n .. ' ' .. owner
  out[#out + 1] = id
  out[#out + 1] = bodies[i]
  out[#out + 1] = seqs[i] or '0'
  out[#out + 1] = n
end
bulk('HSET', B .. 'v3:own', set)
return out
end
)lua";

// ack(fence, owner, archive, retention_ms, A, i0, n_ids, k0, n_keys): acks the ids A[i0 ..
// i0 + n_ids - 1] still leased by `owner`; A[k0 .. k0 + n_keys - 1] are the distinct keys of the
// acked events as claimed (whose tails may name one of them), or the one entry "?" (unknown:
// read from the bodies). Indices into ARGV, so the settle script passes its arguments uncopied.
// Returns count or -1 when fenced off (the writer lease changed hands since the claim).
inline constexpr const char* kAckFn = R"lua(
local function ack(fence, owner, archive, retention, A, i0, n_ids, k0, n_keys)
if not fence_ok(fence) then return -1 end
local own = B .. 'v3:own'
local now = 0
if archive then now = now_ms() end
local ids, seen = {}, {}
for i = i0, i0 + n_ids - 1 do
  local id = A[i]
  if not seen[id] then
    seen[id] = true
    ids[#ids + 1] = id
  end
end
-- Leased by `owner`: its own value ends in " <owner>" (no string is built per event).
local owns = hmget_all(own, ids)
local tag = ' ' .. owner
local done, is_done = {}, {}
for j, id in ipairs(ids) do
  local v = owns[j]
  if v and #v > #tag and string.find(v, tag, #v - #tag + 1, true) then
    done[#done + 1] = id
    is_done[id] = true
  end
end
local n = #done
if n == 0 then return 0 end
-- The keys whose last event is delivered start a new chain. Ids are unique, so a tail that
-- names any acked id is one of them.
local keys = {}
if n_keys == 1 and A[k0] == '?' then
  local bodies, kseen = hmget_all(B .. 'v3:body', done), {}
  for j = 1, n do
    local k = body_key(bodies[j])
    if k and k ~= '' and not kseen[k] then
      kseen[k] = true
      keys[#keys + 1] = k
    end
  end
else
  for i = k0, k0 + n_keys - 1 do keys[#keys + 1] = A[i] end
end
if #keys > 0 then
  local cur = hmget_all(B .. 'v3:tail', keys)
  local del = {}
  for j, k in ipairs(keys) do
    if cur[j] and is_done[split_link(cur[j])] then del[#del + 1] = k end
  end
  bulk('HDEL', B .. 'v3:tail', del)
end
-- Usually all leased; some are back in pending only after a lease recovery.
if bulk('ZREM', B .. 'v3:leased', done) < n then bulk('ZREM', B .. 'v3:pending', done) end
bulk('ZREM', B .. 'v3:live', done)
bulk('HDEL', own, done)
if archive then
  local bodies = hmget_all(B .. 'v3:body', done)
  local keep, az = {}, {}
  for j, id in ipairs(done) do
    keep[#keep + 1] = id; keep[#keep + 1] = bodies[j] or ''
    az[#az + 1] = now; az[#az + 1] = id
  end
  bulk('HSET', B .. 'v3:archived', keep)
  bulk('ZADD', B .. 'v3:archive', az)
  if retention > 0 then
    local old =
        redis.call('ZRANGEBYSCORE', B .. 'v3:archive', '-inf', now - retention, 'LIMIT', 0, 1000)
    bulk('HDEL', B .. 'v3:archived', old)
    bulk('ZREM', B .. 'v3:archive', old)
  end
end
bulk('HDEL', B .. 'v3:body', done)
bulk('HDEL', B .. 'v3:link', done)
bulk('HDEL', B .. 'v3:error', done)
return n
end
)lua";

// nack(A), A laid out like ARGV: B, fence, owner, then triples id, error, retry_ms (-1 = dead
// now). Returns count or -1.
inline constexpr const char* kNackFn = R"lua(
local function nack(A)
if not fence_ok(A[2]) then return -1 end
local owner = A[3]
local now, t = now_ms()
local dead_at = t[1] .. string.format('%06d', tonumber(t[2]))
local own = B .. 'v3:own'
local count = 0
for i = 4, #A, 3 do
  local id, err, retry = A[i], A[i + 1], tonumber(A[i + 2])
  local attempts, w = parse_own(redis.call('HGET', own, id))
  if w == owner then
    if retry < 0 then
      local seq = redis.call('ZSCORE', B .. 'v3:live', id) or '0'
      unlink_event(id, body_key(redis.call('HGET', B .. 'v3:body', id)))
      redis.call('ZADD', B .. 'v3:dead', seq, id)
      redis.call('HSET', B .. 'v3:dead_at', id, dead_at)
    else
      redis.call('ZREM', B .. 'v3:leased', id)
      redis.call('ZADD', B .. 'v3:pending', now + retry, id)
    end
    redis.call('HSET', B .. 'v3:error', id, err)
    redis.call('HSET', own, id, attempts)  -- no longer leased
    count = count + 1
  end
end
return count
end
)lua";

// release(A), A laid out like ARGV: B, fence, owner, ids... Back to pending, due now, attempt
// not counted. Returns count or -1.
inline constexpr const char* kReleaseFn = R"lua(
local function release(A)
if not fence_ok(A[2]) then return -1 end
local owner = A[3]
local now = now_ms()
local own = B .. 'v3:own'
local n = 0
for i = 4, #A do
  local id = A[i]
  local attempts, w = parse_own(redis.call('HGET', own, id))
  if w == owner then
    redis.call('ZREM', B .. 'v3:leased', id)
    redis.call('ZADD', B .. 'v3:pending', now, id)
    redis.call('HSET', own, id, math.max(0, attempts - 1))  -- the attempt does not count
    n = n + 1
  end
end
if n > 0 then redis.call('PUBLISH', B .. 'wake', '1') end
return n
end
)lua";

// Bodies of the single-purpose scripts over the functions above (ARGV as documented there).
inline constexpr const char* kClaimBody = R"lua(
local bad = layout_error()
if bad then return bad end
return claim(ARGV)
)lua";
// ARGV: B, fence, owner, archive (1/0), retention_ms, n_ids, ids..., keys... (see ack).
inline constexpr const char* kAckBody = R"lua(
local n_ids = tonumber(ARGV[6])
return ack(ARGV[2], ARGV[3], ARGV[4] == '1', tonumber(ARGV[5]), ARGV, 7, n_ids, 7 + n_ids,
           #ARGV - 6 - n_ids)
)lua";
inline constexpr const char* kNackBody = "return nack(ARGV)\n";
inline constexpr const char* kReleaseBody = "return release(ARGV)\n";

// Store::settle_and_claim in one script: ack, nack, release (each fenced like the separate
// scripts), then claim. ARGV: B, fence, owner (of the settled batch), archive (1/0),
// retention_ms, n_acks, n_ack_keys, n_nacks, n_releases, then the claim's token, max, lease_ms,
// ordered, new owner, scan_limit, writer_lease_ms, then n_acks ids and n_ack_keys keys (as for
// ack), n_nacks triples (id, error, retry_ms), n_releases ids. Returns {acked, nacked, released,
// <claim's reply>} (counts -1 when fenced off).
inline constexpr const char* kSettleBody = R"lua(
local bad = layout_error()
if bad then return bad end
local fence, owner = ARGV[2], ARGV[3]
local na, nk = tonumber(ARGV[6]), tonumber(ARGV[7])
local nn, nr = tonumber(ARGV[8]), tonumber(ARGV[9])
local i = 17
local counts = {0, 0, 0}
if na > 0 then
  counts[1] = ack(fence, owner, ARGV[4] == '1', tonumber(ARGV[5]), ARGV, i, na, i + na, nk)
end
i = i + na + nk
if nn > 0 then
  local a = {B, fence, owner}
  for j = i, i + nn * 3 - 1 do a[#a + 1] = ARGV[j] end
  counts[2] = nack(a)
end
i = i + nn * 3
if nr > 0 then
  local a = {B, fence, owner}
  for j = i, i + nr - 1 do a[#a + 1] = ARGV[j] end
  counts[3] = release(a)
end
local out = claim({B, ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14], ARGV[15], ARGV[16]})
local r = {counts[1], counts[2], counts[3]}
for j = 1, #out do r[#r + 1] = out[j] end
return r
)lua";

// ARGV: B, token, fence, owner, lease_ms, writer_lease_ms, ids... Returns 1 (held) or 0 (lost).
// The writer lease as in kHeartbeat, then the events' leases.
inline constexpr const char* kRenew = R"lua(
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
)lua";

// ARGV: B, token, fence, writer_lease_ms. The writer lease's heartbeat (every third of it, from
// the Store's own thread while it holds the lease). Returns 1 (held) or 0 (lost).
inline constexpr const char* kHeartbeat = R"lua(
if keep_writer_lease(ARGV[2], ARGV[3], tonumber(ARGV[4])) then return 1 end
return 0
)lua";

// ARGV: B, token. Compare-and-delete of the writer lease (Store closed). Returns 1 if deleted.
inline constexpr const char* kUnlock = R"lua(
if redis.call('GET', B .. 'lock') == ARGV[2] then return redis.call('DEL', B .. 'lock') end
return 0
)lua";

// ARGV: B. Returns {pending, leased, dead, archived, now_s, now_us, oldest body or ''}.
inline constexpr const char* kStats = R"lua(
local bad = layout_error()
if bad then return bad end
local now, t = now_ms()
local due_leased = redis.call('ZCOUNT', B .. 'v3:leased', '-inf', now)
local pending = redis.call('ZCARD', B .. 'v3:pending') + due_leased
local leased = redis.call('ZCARD', B .. 'v3:leased') - due_leased
local oldest = ''
local first = redis.call('ZRANGE', B .. 'v3:live', 0, 0)
if #first > 0 then oldest = redis.call('HGET', B .. 'v3:body', first[1]) or '' end
return {pending, leased, redis.call('ZCARD', B .. 'v3:dead'), redis.call('ZCARD', B .. 'v3:archive'),
        t[1], t[2], oldest}
)lua";

// ARGV: B, which ('live' or 'dead'), limit. Returns flat fields per event:
// id, body, seq, attempts, last_error, dead_at.
inline constexpr const char* kList = R"lua(
local bad = layout_error()
if bad then return bad end
local r = redis.call('ZRANGE', B .. 'v3:' .. ARGV[2], 0, tonumber(ARGV[3]) - 1, 'WITHSCORES')
local ids, seqs = {}, {}
for i = 1, #r, 2 do ids[#ids + 1] = r[i]; seqs[#seqs + 1] = r[i + 1] end
local out = {}
if #ids == 0 then return out end
local bodies = hmget_all(B .. 'v3:body', ids)
local owns = hmget_all(B .. 'v3:own', ids)
local errors = hmget_all(B .. 'v3:error', ids)
local dead_at = hmget_all(B .. 'v3:dead_at', ids)
for j, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = bodies[j] or ''
  out[#out + 1] = seqs[j]
  out[#out + 1] = parse_own(owns[j])
  out[#out + 1] = errors[j] or ''
  out[#out + 1] = dead_at[j] or ''
end
return out
)lua";

// ARGV: B, mode ('ids' or 'all'), limit (for 'all'), ids... Dead -> pending, attempts 0.
inline constexpr const char* kRetry = R"lua(
local bad = layout_error()
if bad then return bad end
local ids
if ARGV[2] == 'all' then
  ids = redis.call('ZRANGE', B .. 'v3:dead', 0, tonumber(ARGV[3]) - 1)
else
  ids = {}
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
end
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
    redis.call('HDEL', B .. 'v3:dead_at', id)
    n = n + 1
  end
end
if n > 0 then redis.call('PUBLISH', B .. 'wake', '1') end
return n
)lua";

// ARGV: B, mode ('ids' or 'all'), limit, ids... Dead -> deleted.
inline constexpr const char* kDiscard = R"lua(
local bad = layout_error()
if bad then return bad end
local ids
if ARGV[2] == 'all' then
  ids = redis.call('ZRANGE', B .. 'v3:dead', 0, tonumber(ARGV[3]) - 1)
else
  ids = {}
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local n = 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', B .. 'v3:dead', id) == 1 then
    for _, h in ipairs({'v3:body', 'v3:own', 'v3:link', 'v3:error', 'v3:dead_at'}) do
      redis.call('HDEL', B .. h, id)
    end
    n = n + 1
  end
end
return n
)lua";

}  // namespace outpost::redis_store
