-- ARGV: B, token. Compare-and-delete of the writer lease (Store closed or partition given up).
-- Returns 1 if deleted. Clears the writer's owner too, so keep_writer_lease (prologue.lua) does
-- not take a given-up lease back (docs/redis.md, Partitions).
if redis.call('GET', B .. 'lock') == ARGV[2] then
  redis.call('HSET', B .. 'writer', 'owner', '')
  return redis.call('DEL', B .. 'lock')
end
return 0
