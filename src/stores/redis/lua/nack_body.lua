-- The nack script (prologue.lua, nack_fn.lua, then this). ARGV as documented in nack_fn.lua.
return nack(ARGV)
