-- ARGV: B, token. Compare-and-delete of the writer lease (Store closed). Returns 1 if deleted.
if redis.call('GET', B .. 'lock') == ARGV[2] then return redis.call('DEL', B .. 'lock') end
return 0
