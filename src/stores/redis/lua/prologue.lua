-- Shared prologue: server time, the layout check, the writer fence check, bulk helpers.
local B = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end
-- nil, or an error reply when the prefix still holds events of an older layout (its `live` or
-- `dead` sorted set, names layout 3 does not use): this build must neither read them as its own
-- nor let them wait unseen, so it refuses until the older build has delivered or discarded them.
-- Also an error reply when the prefix is partitioned (its `partitions` key, set by the first
-- Store opened with partitions=N): its events live in the partitions' key spaces, so this
-- unpartitioned Store must not emit or claim beside them (docs/redis.md, Partitions).
local function layout_error()
  if redis.call('EXISTS', B .. 'live', B .. 'dead', B .. 'partitions') == 0 then return nil end
  local parts = redis.call('GET', B .. 'partitions')
  if parts then
    return redis.error_reply('OUTPOST_PARTITIONS the outbox ' .. B .. ' is partitioned (' ..
      parts .. ' partitions): open it with the URL parameter partitions=' .. parts ..
      ' (docs/redis.md, Partitions)')
  end
  return redis.error_reply('OUTPOST_LAYOUT the outbox ' .. B .. ' holds events written by an ' ..
    'older outpost (layout 2; this build uses layout 3): let that build deliver or discard ' ..
    'them first (docs/redis.md, Layout)')
end
local function fence_ok(fence)
  if fence == '0' then return true end
  return redis.call('HGET', B .. 'writer', 'fence') == fence
end
-- Compare-and-renew of the writer lease for `ms`: ours -> extended; expired and nobody took it
-- since (fence unchanged, still its owner: not given up, unlock.lua) -> taken back; anything
-- else -> lost (false).
local function keep_writer_lease(token, fence, ms)
  local lock = B .. 'lock'
  local cur = redis.call('GET', lock)
  if cur == token then
    if redis.call('PTTL', lock) < ms then redis.call('PEXPIRE', lock, ms) end
  elseif not cur and fence_ok(fence) and redis.call('HGET', B .. 'writer', 'owner') == token then
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
-- The dead ids a retry or discard applies to (ARGV: B, mode, limit, ids...): mode 'all' takes
-- the first `limit` dead events, else the ids ARGV[4..].
local function dead_targets()
  if ARGV[2] == 'all' then return redis.call('ZRANGE', B .. 'v3:dead', 0, tonumber(ARGV[3]) - 1) end
  local ids = {}
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
  return ids
end
-- Takes a dying event out of the live structures. Its key's tail may keep naming it: a later
-- event of the key then links to the dead letter, which holds it back in strict order
-- (ClaimOrder::strict) and not otherwise; discard (and dead_retention) drop that tail.
local function unlink_event(id)
  -- Usually leased; back in pending only after a lease recovery.
  if redis.call('ZREM', B .. 'v3:leased', id) == 0 then redis.call('ZREM', B .. 'v3:pending', id) end
  redis.call('ZREM', B .. 'v3:live', id)
end
-- Deletes dead letters (discard, dead_retention): every trace of each, and its key's tail when
-- that names it. Returns how many were dead.
local function delete_dead(ids)
  local n = 0
  for _, id in ipairs(ids) do
    if redis.call('ZREM', B .. 'v3:dead', id) == 1 then
      local key = body_key(redis.call('HGET', B .. 'v3:body', id))
      if key and key ~= '' then drop_tails({key}, {{[id] = true}}) end
      for _, h in ipairs({'v3:body', 'v3:own', 'v3:link', 'v3:error', 'v3:dead_at', 'v3:crashes'}) do
        redis.call('HDEL', B .. h, id)
      end
      redis.call('ZREM', B .. 'v3:at', id)
      redis.call('ZREM', B .. 'v3:died', id)
      n = n + 1
    end
  end
  return n
end
