#pragma once
// The Lua scripts of the Redis store. Every script gets KEYS[1] = a key of the outbox (so
// Redis Cluster routes it to the slot of `{prefix}`) and ARGV[1] = the key base "{prefix}:";
// the other keys are built from the base and all hash to the same slot.
//
// Keys (B = "{prefix}:"):
//   B.."seq"        INCR sequence (emit order)
//   B.."e:"..id     hash per live or dead event: t type, k key, p payload, o occurred_at (us),
//                   h headers, s seq, q predecessor "<id> <seq>" (the key's last event when
//                   this one was appended; '' = none), r last error, d dead_at (us)
//   B.."own"        hash id -> "<attempts>" or "<attempts> <lease owner>" while leased (no
//                   field = 0 attempts): one hash, so a claim writes and an ack reads the
//                   owners of a whole batch with one HSET / HMGET instead of one per event
//   B.."a:"..id     archived event (hash renamed on ack when archiving)
//   B.."pending"    zset id -> due time (ms, server clock)
//   B.."leased"     zset id -> lease expiry (ms)
//   B.."live"       zset id -> seq of every undelivered event (list order, oldest)
//   B.."dead"       zset id -> seq
//   B.."archive"    zset id -> ack time (ms)
//   B.."tail"       hash key -> "<id> <seq>" of the key's last appended undelivered event
//                   (ordered mode: each event links to its predecessor of the same key, and is
//                   claimable once that one is no longer live (acked, dead, discarded) or is
//                   taken by the same claim; links, unlike a zset per key, cost no command per
//                   event: the tail hash is read and written once per append and per ack)
//   B.."lock"       writer lease: the holder's token, PX = lease
//   B.."writer"     hash: owner (last holder's token), fence (incremented when the holder changes)
//   B.."wake"       pub/sub channel published on emit and retry

namespace outpost::redis_store {

// Shared prologue: server time and the writer fence check.
inline constexpr const char* kPrologue = R"lua(
local B = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end
local function fence_ok(fence)
  if fence == '0' then return true end
  return redis.call('HGET', B .. 'writer', 'fence') == fence
end
-- Runs `cmd key <items...>` in chunks (Lua's unpack has a limit; 1000 keeps ZADD pairs whole).
-- Returns the sum of integer replies.
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
-- HMGET of `items` fields of hash `key` in chunks; the values in order (false = missing).
local function hmget_all(key, items)
  local out = {}
  for i = 1, #items, 1000 do
    local r = redis.call('HMGET', key, unpack(items, i, math.min(i + 999, #items)))
    for j = 1, #r do out[#out + 1] = r[j] end
  end
  return out
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
  local cur = hmget_all(B .. 'tail', keys)
  local del = {}
  for j, k in ipairs(keys) do
    if cur[j] and ids[j][split_link(cur[j])] then del[#del + 1] = k end
  end
  bulk('HDEL', B .. 'tail', del)
end
local function unlink_event(id, key)
  -- Usually leased; back in pending only after a lease recovery.
  if redis.call('ZREM', B .. 'leased', id) == 0 then redis.call('ZREM', B .. 'pending', id) end
  redis.call('ZREM', B .. 'live', id)
  if key and key ~= '' then drop_tails({key}, {{[id] = true}}) end
end
)lua";

// ARGV: B, n, then per event: id, type, key, payload, occurred_us, headers. Returns n.
// Runs as EVALSHA on its own, or as EVAL queued inside the caller's MULTI.
inline constexpr const char* kAppend = R"lua(
local n = tonumber(ARGV[2])
local seen, keys = {}, {}
for i = 0, n - 1 do
  local id = ARGV[3 + i * 6]
  if seen[id] then return redis.error_reply('OUTPOST_DUPLICATE duplicate event id ' .. id) end
  seen[id] = true
  keys[#keys + 1] = B .. 'e:' .. id
end
if bulk('EXISTS', nil, keys) > 0 then
  for i = 0, n - 1 do
    if redis.call('EXISTS', keys[i + 1]) == 1 then
      return redis.error_reply('OUTPOST_DUPLICATE duplicate event id ' .. ARGV[3 + i * 6])
    end
  end
end
local now = now_ms()
local last = redis.call('INCRBY', B .. 'seq', n)
local first = last - n + 1
-- Each keyed event links to its key's previous event (the tail, or one earlier in this call).
local ukeys, tails = {}, {}
for i = 0, n - 1 do
  local key = ARGV[5 + i * 6]
  if key ~= '' and tails[key] == nil then
    tails[key] = ''
    ukeys[#ukeys + 1] = key
  end
end
if #ukeys > 0 then
  local cur = hmget_all(B .. 'tail', ukeys)
  for j, k in ipairs(ukeys) do tails[k] = cur[j] or '' end
end
local pend, live = {}, {}
for i = 0, n - 1 do
  local a = 3 + i * 6
  local id, key, seq = ARGV[a], ARGV[a + 2], first + i
  local q = ''
  if key ~= '' then
    q = tails[key]
    tails[key] = id .. ' ' .. seq
  end
  redis.call('HSET', B .. 'e:' .. id, 't', ARGV[a + 1], 'k', key, 'p', ARGV[a + 3],
             'o', ARGV[a + 4], 'h', ARGV[a + 5], 's', seq, 'q', q)
  pend[#pend + 1] = now; pend[#pend + 1] = id
  live[#live + 1] = seq; live[#live + 1] = id
end
bulk('ZADD', B .. 'pending', pend)
bulk('ZADD', B .. 'live', live)
if #ukeys > 0 then
  local set = {}
  for _, k in ipairs(ukeys) do set[#set + 1] = k; set[#set + 1] = tails[k] end
  bulk('HSET', B .. 'tail', set)
end
redis.call('PUBLISH', B .. 'wake', '1')
return n
)lua";

// claim(A), A laid out like ARGV: B, token ('' = no writer lease), max, lease_ms, ordered (1/0),
// owner, scan_limit.
// Returns {fence, hint_ms, id, type, key, payload, occurred_us, headers, seq, attempts, ...}.
// fence -1: the writer lease is held by another Store (hint = its remaining ms).
// hint_ms: when nothing was claimed, ms until the next retry is due or lease expires (-1: none).
// Ordered: events in due-time (then emit) order, each taken only after its key's previous event
// (see "tail" above). Cost per claimed event: one HMGET and its share of batched commands.
inline constexpr const char* kClaimFn = R"lua(
local function claim(A)
local token, max, lease = A[2], tonumber(A[3]), tonumber(A[4])
local ordered, owner, scan_limit = A[5] == '1', A[6], tonumber(A[7])
local now = now_ms()
local pending, leased = B .. 'pending', B .. 'leased'
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
    redis.call('SET', lock, token, 'PX', lease)
  elseif cur == token then
    if redis.call('PTTL', lock) < lease then redis.call('PEXPIRE', lock, lease) end
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
local picked, taken, fields = {}, {}, {}
local function fetch(id)
  local f = fields[id]
  if not f then
    f = redis.call('HMGET', B .. 'e:' .. id, 't', 'k', 'p', 'o', 'h', 's', 'q')
    fields[id] = f
  end
  return f
end
local function take(id)
  picked[#picked + 1] = id; taken[id] = true
end
-- An event's predecessor link. Read with the whole event (needed if it is taken) until a window
-- meets a blocked event; after that only the link, so a scan past many blocked events (a key
-- whose earlier event is in flight) does not read their payloads.
local links_only, link_cache = false, {}
local function link_of(id)
  local f = fields[id]
  if f then return f[7] end
  if not links_only then return fetch(id)[7] end
  local q = link_cache[id]
  if q == nil then
    q = redis.call('HGET', B .. 'e:' .. id, 'q') or ''
    link_cache[id] = q
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
    local s = redis.call('ZSCORE', B .. 'live', pid)
    if not s or tonumber(s) ~= pseq then break end  -- delivered or dead: the chain ends
    if blocked[pid] or #chain >= room or not due(pid) then
      blocked[id] = true
      for _, c in ipairs(chain) do blocked[c] = true end
      return
    end
    chain[#chain + 1] = pid
    local q = link_of(pid)
    if not q or q == '' then break end
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
  local links, ask = {}, {}
  for j, id in ipairs(w) do
    local q = link_of(id)
    if q and q ~= '' then
      local pid, pseq = split_link(q)
      links[j] = {pid, tonumber(pseq)}
      if not taken[pid] then ask[#ask + 1] = pid end
    end
  end
  local scores, is_due = {}, {}
  if #ask > 0 then
    local r = redis.call('ZMSCORE', B .. 'live', unpack(ask))
    local alive = {}
    for j, pid in ipairs(ask) do
      scores[pid] = r[j]
      if r[j] then alive[#alive + 1] = pid end
    end
    -- Whether each live predecessor is due (pending and due, or its lease expired), batched:
    -- usually it is in flight in another batch, and its successor is blocked at no extra cost.
    if #alive > 0 then
      local rp = redis.call('ZMSCORE', pending, unpack(alive))
      local rl = redis.call('ZMSCORE', leased, unpack(alive))
      for j, pid in ipairs(alive) do
        local sc = rp[j] or rl[j]
        is_due[pid] = sc and tonumber(sc) <= now
      end
    end
  end
  for j, id in ipairs(w) do
    if #picked >= max then return end
    local l = links[j]
    if taken[id] or blocked[id] then  -- taken with a chain above, or behind a blocked one
    elseif not l or taken[l[1]] or not scores[l[1]] or tonumber(scores[l[1]]) ~= l[2] then
      take(id)
    elseif blocked[l[1]] or not is_due[l[1]] then
      blocked[id] = true
      blocked[l[1]] = true
      links_only = true
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
local owns = hmget_all(B .. 'own', picked)
local set = {}
for i, id in ipairs(picked) do
  local f = fetch(id)
  local n = parse_own(owns[i]) + 1
  set[#set + 1] = id; set[#set + 1] = n .. ' ' .. owner
  out[#out + 1] = id
  for j = 1, 6 do out[#out + 1] = f[j] or '' end
  out[#out + 1] = n
end
bulk('HSET', B .. 'own', set)
return out
end
)lua";

// ack(A), A laid out like ARGV: B, fence, owner, archive (1/0), retention_ms (0 = keep), then
// pairs id, "=" .. key (the key as claimed) or "?" (unknown: read from the event).
// Returns count or -1 when fenced off (the writer lease changed hands since the claim).
inline constexpr const char* kAckFn = R"lua(
local function ack(A)
if not fence_ok(A[2]) then return -1 end
local owner, archive, retention = A[3], A[4] == '1', tonumber(A[5])
local own = B .. 'own'
local now = 0
if archive then now = now_ms() end
local ids, kinfo, seen = {}, {}, {}
for i = 6, #A - 1, 2 do
  local id = A[i]
  if not seen[id] then
    seen[id] = true
    ids[#ids + 1] = id; kinfo[#kinfo + 1] = A[i + 1]
  end
end
local owns = hmget_all(own, ids)
local done, dels, by_key = {}, {}, {}
for j, id in ipairs(ids) do
  local _, w = parse_own(owns[j])
  if w == owner then
    done[#done + 1] = id
    dels[#dels + 1] = B .. 'e:' .. id
    local k = kinfo[j]
    if string.sub(k, 1, 1) == '=' then
      k = string.sub(k, 2)
    else
      k = redis.call('HGET', B .. 'e:' .. id, 'k') or ''
    end
    if k ~= '' then
      local l = by_key[k]
      if not l then l = {}; by_key[k] = l end
      l[#l + 1] = id
    end
  end
end
-- The keys whose last event is delivered start a new chain.
local tk, tids = {}, {}
for k, l in pairs(by_key) do
  local set = {}
  for _, id in ipairs(l) do set[id] = true end
  tk[#tk + 1] = k; tids[#tids + 1] = set
end
drop_tails(tk, tids)
local n = #done
if n > 0 then
  -- Usually all leased; some are back in pending only after a lease recovery.
  if bulk('ZREM', B .. 'leased', done) < n then bulk('ZREM', B .. 'pending', done) end
  bulk('ZREM', B .. 'live', done)
  bulk('HDEL', own, done)
  if archive then
    for _, id in ipairs(done) do
      redis.call('RENAME', B .. 'e:' .. id, B .. 'a:' .. id)
      redis.call('ZADD', B .. 'archive', now, id)
    end
  else
    bulk('DEL', nil, dels)
  end
end
if archive and retention > 0 then
  local old = redis.call('ZRANGEBYSCORE', B .. 'archive', '-inf', now - retention, 'LIMIT', 0, 1000)
  for _, id in ipairs(old) do
    redis.call('DEL', B .. 'a:' .. id)
    redis.call('ZREM', B .. 'archive', id)
  end
end
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
local own = B .. 'own'
local count = 0
for i = 4, #A, 3 do
  local id, err, retry = A[i], A[i + 1], tonumber(A[i + 2])
  local e = B .. 'e:' .. id
  local attempts, w = parse_own(redis.call('HGET', own, id))
  if w == owner then
    local f = redis.call('HMGET', e, 'k', 's')
    if retry < 0 then
      unlink_event(id, f[1])
      redis.call('ZADD', B .. 'dead', f[2], id)
      redis.call('HSET', e, 'r', err, 'd', dead_at)
    else
      redis.call('ZREM', B .. 'leased', id)
      redis.call('ZADD', B .. 'pending', now + retry, id)
      redis.call('HSET', e, 'r', err)
    end
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
local own = B .. 'own'
local n = 0
for i = 4, #A do
  local id = A[i]
  local attempts, w = parse_own(redis.call('HGET', own, id))
  if w == owner then
    redis.call('ZREM', B .. 'leased', id)
    redis.call('ZADD', B .. 'pending', now, id)
    redis.call('HSET', own, id, math.max(0, attempts - 1))  -- the attempt does not count
    n = n + 1
  end
end
if n > 0 then redis.call('PUBLISH', B .. 'wake', '1') end
return n
end
)lua";

// Bodies of the single-purpose scripts over the functions above (ARGV as documented there).
inline constexpr const char* kClaimBody = "return claim(ARGV)\n";
inline constexpr const char* kAckBody = "return ack(ARGV)\n";
inline constexpr const char* kNackBody = "return nack(ARGV)\n";
inline constexpr const char* kReleaseBody = "return release(ARGV)\n";

// Store::settle_and_claim in one script: ack, nack, release (each fenced like the separate
// scripts), then claim. ARGV: B, fence, owner (of the settled batch), archive (1/0),
// retention_ms, n_acks, n_nacks, n_releases, then the claim's token, max, lease_ms, ordered,
// new owner, scan_limit, then n_acks pairs (id, key info as for ack), n_nacks triples (id,
// error, retry_ms), n_releases ids.
// Returns {acked, nacked, released, <claim's reply>} (counts -1 when fenced off).
inline constexpr const char* kSettleBody = R"lua(
local fence, owner = ARGV[2], ARGV[3]
local na, nn, nr = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local i = 15
local counts = {0, 0, 0}
if na > 0 then
  local a = {B, fence, owner, ARGV[4], ARGV[5]}
  for j = i, i + na * 2 - 1 do a[#a + 1] = ARGV[j] end
  counts[1] = ack(a)
end
i = i + na * 2
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
local out = claim({B, ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14]})
local r = {counts[1], counts[2], counts[3]}
for j = 1, #out do r[#r + 1] = out[j] end
return r
)lua";

// ARGV: B, token, fence, owner, lease_ms, ids... Returns 1 (held) or 0 (lost).
// Compare-and-renew of the writer lease: ours -> extended; expired and nobody took it since
// (fence unchanged) -> taken back; anything else -> lost.
inline constexpr const char* kRenew = R"lua(
local token, fence, owner, lease = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
if token ~= '' then
  local lock = B .. 'lock'
  local cur = redis.call('GET', lock)
  if cur == token then
    if redis.call('PTTL', lock) < lease then redis.call('PEXPIRE', lock, lease) end
  elseif not cur and fence_ok(fence) then
    redis.call('SET', lock, token, 'PX', lease)
  else
    return 0
  end
  if not fence_ok(fence) then return 0 end
end
local now = now_ms()
local held = 1
for i = 6, #ARGV do
  local id = ARGV[i]
  local _, w = parse_own(redis.call('HGET', B .. 'own', id))
  if w == owner then
    redis.call('ZREM', B .. 'pending', id)
    redis.call('ZADD', B .. 'leased', now + lease, id)
  elseif w then
    held = 0
  end
end
return held
)lua";

// ARGV: B, token. Compare-and-delete of the writer lease (Store closed). Returns 1 if deleted.
inline constexpr const char* kUnlock = R"lua(
if redis.call('GET', B .. 'lock') == ARGV[2] then return redis.call('DEL', B .. 'lock') end
return 0
)lua";

// ARGV: B. Returns {pending, leased, dead, archived, now_s, now_us, oldest occurred_us or ''}.
inline constexpr const char* kStats = R"lua(
local now, t = now_ms()
local due_leased = redis.call('ZCOUNT', B .. 'leased', '-inf', now)
local pending = redis.call('ZCARD', B .. 'pending') + due_leased
local leased = redis.call('ZCARD', B .. 'leased') - due_leased
local oldest = ''
local first = redis.call('ZRANGE', B .. 'live', 0, 0)
if #first > 0 then oldest = redis.call('HGET', B .. 'e:' .. first[1], 'o') or '' end
return {pending, leased, redis.call('ZCARD', B .. 'dead'), redis.call('ZCARD', B .. 'archive'),
        t[1], t[2], oldest}
)lua";

// ARGV: B, which ('live' or 'dead'), limit. Returns flat fields per event:
// id, type, key, payload, occurred_us, headers, seq, attempts, last_error, dead_at.
inline constexpr const char* kList = R"lua(
local ids = redis.call('ZRANGE', B .. ARGV[2], 0, tonumber(ARGV[3]) - 1)
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', B .. 'e:' .. id, 't', 'k', 'p', 'o', 'h', 's', 'r', 'd')
  out[#out + 1] = id
  for j = 1, 6 do out[#out + 1] = f[j] or '' end
  out[#out + 1] = parse_own(redis.call('HGET', B .. 'own', id))
  out[#out + 1] = f[7] or ''
  out[#out + 1] = f[8] or ''

end
return out
)lua";

// ARGV: B, mode ('ids' or 'all'), limit (for 'all'), ids... Dead -> pending, attempts 0.
inline constexpr const char* kRetry = R"lua(
local ids
if ARGV[2] == 'all' then
  ids = redis.call('ZRANGE', B .. 'dead', 0, tonumber(ARGV[3]) - 1)
else
  ids = {}
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local now = now_ms()
local n = 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', B .. 'dead', id) == 1 then
    local e = B .. 'e:' .. id
    local f = redis.call('HMGET', e, 'k', 's')
    redis.call('ZADD', B .. 'pending', now, id)
    redis.call('ZADD', B .. 'live', f[2], id)
    -- Later events of its key that are still undelivered link to it (or to one after it) and
    -- wait; when none is left, the key's next events chain behind it.
    if f[1] and f[1] ~= '' and not redis.call('HGET', B .. 'tail', f[1]) then
      redis.call('HSET', B .. 'tail', f[1], id .. ' ' .. f[2])
    end
    redis.call('HDEL', B .. 'own', id)  -- attempts 0
    redis.call('HDEL', e, 'd')
    n = n + 1
  end
end
if n > 0 then redis.call('PUBLISH', B .. 'wake', '1') end
return n
)lua";

// ARGV: B, mode ('ids' or 'all'), limit, ids... Dead -> deleted.
inline constexpr const char* kDiscard = R"lua(
local ids
if ARGV[2] == 'all' then
  ids = redis.call('ZRANGE', B .. 'dead', 0, tonumber(ARGV[3]) - 1)
else
  ids = {}
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local n = 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', B .. 'dead', id) == 1 then
    redis.call('DEL', B .. 'e:' .. id)
    redis.call('HDEL', B .. 'own', id)
    n = n + 1
  end
end
return n
)lua";

}  // namespace outpost::redis_store
