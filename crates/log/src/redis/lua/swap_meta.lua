-- Compare-and-set of a live session's record: `1` replaced, `0` the
-- record is not `expect`, `-1` no live session.
local session = KEYS[1]
local expect, meta = ARGV[1], ARGV[2]
if redis.call('HGET', session, 'e') ~= '0' then return -1 end
if (redis.call('HGET', session, 'm') or '') ~= expect then return 0 end
redis.call('HSET', session, 'm', meta)
return 1
