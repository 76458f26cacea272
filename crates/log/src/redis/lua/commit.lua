-- After `WAIT`: the committed head `c` moves up to `committed`. Replication
-- is one ordered stream, so replicas holding seq N hold everything before it.
local state = KEYS[1]
local committed = ARGV[1]
local c = tonumber(redis.call('HGET', state, 'c'))
if c and tonumber(committed) > c then redis.call('HSET', state, 'c', committed) end
return 0
