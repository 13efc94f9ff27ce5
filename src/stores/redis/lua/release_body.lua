-- The release script (prologue.lua, release_fn.lua, then this). ARGV as documented in
-- release_fn.lua.
return release(ARGV)
