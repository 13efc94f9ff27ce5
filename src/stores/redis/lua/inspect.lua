-- ARGV: B, which ('blocked' or 'leased'), limit. Read-only. Returns flat fields per event, in
-- seq order: id, body, seq, attempts, last_error, due (ms, '' while leased), lease owner ('' =
-- not leased), fence, lease_until (ms), crashes, reason ('' for leased).
-- blocked: the failed events (a last error, attempts > 0) with no live predecessor (see "link"
-- in redis_scripts.h): the heads their keys wait behind (reason 'failing'); and the heads whose
-- predecessor is a dead letter (reason 'dead': held under ClaimOrder::strict), found by walking
-- each dead letter's key back from its tail. Candidates come from the error hash (failed events
-- still live, plus dead letters), so its size (and those keys' lengths) bounds the work.
-- leased: the events under a live lease. The fence is the writer lease's when the claim's owner
-- ("<token>#<n>") holds the writer lease now, else 0 (as a claim returns it).
local bad = layout_error()
if bad then return bad end
local now = now_ms()
local limit = tonumber(ARGV[3])
local live, pending, leased = B .. 'v3:live', B .. 'v3:pending', B .. 'v3:leased'
local ids
if ARGV[2] == 'leased' then
  ids = redis.call('ZRANGEBYSCORE', leased, '(' .. now, '+inf')
else
  ids = redis.call('HKEYS', B .. 'v3:error')
end
local rows = {}
if #ids == 0 then return rows end
local seqs = mget_all('ZMSCORE', live, ids)
local owns = hmget_all(B .. 'v3:own', ids)
local links = hmget_all(B .. 'v3:link', ids)
local errors = hmget_all(B .. 'v3:error', ids)
for j, id in ipairs(ids) do
  local attempts, owner = parse_own(owns[j])
  local keep = seqs[j] ~= false
  if keep and ARGV[2] ~= 'leased' then
    local key = body_key(redis.call('HGET', B .. 'v3:body', id))
    keep = attempts > 0 and errors[j] and errors[j] ~= '' and key and key ~= ''
    if keep and links[j] then
      local pid, pseq = split_link(links[j])
      local s = redis.call('ZSCORE', live, pid)
      keep = not s or tonumber(s) ~= tonumber(pseq)
    end
  end
  if keep then
    rows[#rows + 1] = {id, tonumber(seqs[j]), attempts, owner, errors[j] or '', 'failing'}
  end
end
if ARGV[2] ~= 'leased' then
  local at, keys = {}, {}
  for i, r in ipairs(rows) do at[r[1]] = i end
  for j, id in ipairs(ids) do
    local dseq = seqs[j] == false and redis.call('ZSCORE', B .. 'v3:dead', id)
    local key = dseq and body_key(redis.call('HGET', B .. 'v3:body', id))
    local tail = key and key ~= '' and not keys[key] and redis.call('HGET', B .. 'v3:tail', key)
    if tail then
      keys[key] = true
      -- Back from the key's last event to its earliest live one (the head).
      local hid = split_link(tail)
      local hseq = redis.call('ZSCORE', live, hid)
      local pid, pseq
      while hseq do
        local l = redis.call('HGET', B .. 'v3:link', hid)
        if not l then break end
        pid, pseq = split_link(l)
        local s = redis.call('ZSCORE', live, pid)
        if not s or tonumber(s) ~= tonumber(pseq) then break end
        hid, hseq, pid = pid, s, nil
      end
      local d = hseq and pid and redis.call('ZSCORE', B .. 'v3:dead', pid)
      if d and tonumber(d) == tonumber(pseq) then
        if at[hid] then
          rows[at[hid]][6] = 'dead'
        else
          local attempts, owner = parse_own(redis.call('HGET', B .. 'v3:own', hid))
          rows[#rows + 1] = {hid, tonumber(hseq), attempts, owner,
                             redis.call('HGET', B .. 'v3:error', hid) or '', 'dead'}
          at[hid] = #rows
        end
      end
    end
  end
end
table.sort(rows, function(a, b) return a[2] < b[2] end)
local lock = redis.call('GET', B .. 'lock')
local writer_fence = redis.call('HGET', B .. 'writer', 'fence') or '0'
local out = {}
for i = 1, math.min(#rows, limit) do
  local id, seq, attempts, owner, err, reason = unpack(rows[i])
  local due = redis.call('ZSCORE', pending, id)
  local lease_until = redis.call('ZSCORE', leased, id)
  local fence = '0'
  if lease_until and tonumber(lease_until) > now and owner then
    local holder = string.match(owner, '^(.*)#') or owner
    if lock and holder == lock then fence = writer_fence end
  else
    due = due or lease_until  -- an expired lease: claimable since it expired
    lease_until, owner = nil, nil
  end
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', B .. 'v3:body', id) or ''
  out[#out + 1] = tostring(seq)
  out[#out + 1] = attempts
  out[#out + 1] = err
  out[#out + 1] = due or ''
  out[#out + 1] = owner or ''
  out[#out + 1] = fence
  out[#out + 1] = lease_until or ''
  out[#out + 1] = tonumber(redis.call('HGET', B .. 'v3:crashes', id) or 0) or 0
  out[#out + 1] = reason or ''
end
return out
