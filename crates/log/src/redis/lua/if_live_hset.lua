-- Sets one field of a live session's hash.
local session = KEYS[1]
local field = ARGV[1]
local value = ARGV[2]
if redis.call('HGET', session, 'e') ~= '0' then return -1 end
redis.call('HSET', session, field, value)
return 0
