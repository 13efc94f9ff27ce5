-- The ack script (prologue.lua, ack_fn.lua, then this).
-- ARGV: B, fence, owner, archive (1/0), retention (see ack_fn.lua), n_ids, ids..., keys... (see ack_fn.lua).
local n_ids = tonumber(ARGV[6])
return ack(ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5], ARGV, 7, n_ids, 7 + n_ids,
           #ARGV - 6 - n_ids)
