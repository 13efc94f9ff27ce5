-- ARGV: B, mode ('ids' or 'all'), limit, ids... Dead -> deleted.
local bad = layout_error()
if bad then return bad end
return delete_dead(dead_targets())
