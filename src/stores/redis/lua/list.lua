-- ARGV: B, which ('live' or 'dead'), limit. Returns flat fields per event:
-- id, body, seq, attempts, last_error, dead_at, crashes, deliver_at (ms, '' = none).
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
local crashes = hmget_all(B .. 'v3:crashes', ids)
local at = {}
if redis.call('EXISTS', B .. 'v3:at') == 1 then at = mget_all('ZMSCORE', B .. 'v3:at', ids) end
for j, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = bodies[j] or ''
  out[#out + 1] = seqs[j]
  out[#out + 1] = parse_own(owns[j])
  out[#out + 1] = errors[j] or ''
  out[#out + 1] = dead_at[j] or ''
  out[#out + 1] = tonumber(crashes[j] or 0) or 0
  out[#out + 1] = at[j] or ''
end
return out
