-- ack(fence, owner, archive, retention, A, i0, n_ids, k0, n_keys): acks the ids A[i0 ..
-- i0 + n_ids - 1] still leased by `owner`; A[k0 .. k0 + n_keys - 1] are the distinct keys of the
-- acked events as claimed (whose tails may name one of them), or the one entry "?" (unknown:
-- read from the bodies). Indices into ARGV, so the settle script passes its arguments uncopied.
-- retention: "<archive_retention_ms>" or "<archive_retention_ms>,<dead_retention_ms>" (0 = keep
-- forever): each ack also removes up to 1,000 archived events and dead letters older than that.
-- Returns count or -1 when fenced off (the writer lease changed hands since the claim).
local function ack(fence, owner, archive, retention_arg, A, i0, n_ids, k0, n_keys)
if not fence_ok(fence) then return -1 end
local comma = string.find(retention_arg, ',', 1, true)
local retention = tonumber(comma and string.sub(retention_arg, 1, comma - 1) or retention_arg) or 0
local dead_retention = comma and tonumber(string.sub(retention_arg, comma + 1)) or 0
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
if redis.call('EXISTS', B .. 'v3:crashes') == 1 then bulk('HDEL', B .. 'v3:crashes', done) end
local ats = nil  -- deliver_at of the acked scheduled events, for the archive
if redis.call('EXISTS', B .. 'v3:at') == 1 then
  if archive then ats = mget_all('ZMSCORE', B .. 'v3:at', done) end
  bulk('ZREM', B .. 'v3:at', done)
end
if archive then
  local bodies = hmget_all(B .. 'v3:body', done)
  local keep, az, kat = {}, {}, {}
  for j, id in ipairs(done) do
    keep[#keep + 1] = id; keep[#keep + 1] = bodies[j] or ''
    az[#az + 1] = now; az[#az + 1] = id
    if ats and ats[j] then kat[#kat + 1] = id; kat[#kat + 1] = ats[j] end
  end
  bulk('HSET', B .. 'v3:archived', keep)
  bulk('ZADD', B .. 'v3:archive', az)
  bulk('HSET', B .. 'v3:archived_at', kat)
  if retention > 0 then
    local old =
        redis.call('ZRANGEBYSCORE', B .. 'v3:archive', '-inf', now - retention, 'LIMIT', 0, 1000)
    bulk('HDEL', B .. 'v3:archived', old)
    bulk('HDEL', B .. 'v3:archived_at', old)
    bulk('ZREM', B .. 'v3:archive', old)
  end
end
-- Dead letters dead for longer than dead_retention (only those that died since B.."v3:died"
-- exists: docs/redis.md).
if dead_retention > 0 and redis.call('EXISTS', B .. 'v3:died') == 1 then
  local cut = now_ms() - dead_retention
  delete_dead(redis.call('ZRANGEBYSCORE', B .. 'v3:died', '-inf', cut, 'LIMIT', 0, 1000))
end
bulk('HDEL', B .. 'v3:body', done)
bulk('HDEL', B .. 'v3:link', done)
bulk('HDEL', B .. 'v3:error', done)
return n
end
