-- ARGV: B, token, fence, writer_lease_ms. The writer lease's heartbeat (every third of it, from
-- the Store's own thread while it holds the lease). Returns 1 (held) or 0 (lost).
if keep_writer_lease(ARGV[2], ARGV[3], tonumber(ARGV[4])) then return 1 end
return 0
