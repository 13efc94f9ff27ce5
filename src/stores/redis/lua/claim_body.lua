-- The claim script (prologue.lua, claim_fn.lua, then this). ARGV as documented in claim_fn.lua.
local bad = layout_error()
if bad then return bad end
return claim(ARGV)
