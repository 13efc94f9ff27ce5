-- ARGV: B, n, then per event: id, key, body; then, optionally, per event its due time (ms, the
-- server's clock; '' or 0: now): a scheduled event (Event::deliver_at) waits in pending with that
-- score, so a claim takes it once due and its key's later events wait behind it. Returns n.
-- Runs as EVALSHA on its own, or as EVAL queued inside the caller's MULTI.
-- A duplicate id (in the call, or of a live or dead event) rejects the whole call unwritten.
local bad, ids = append_check(ARGV, {})
if bad then return bad end
local n = append_write(ARGV, ids, now_ms())
redis.call('PUBLISH', B .. 'wake', '1')
return n
