-- Takes a live session's owner lease (field `o`) for `instance` if it has no
-- owner or still names `dead_owner` (the owner the caller saw dead); returns the
-- owner after, or `-` for a session that is not live.
local session = KEYS[1]
local instance = ARGV[1]
local dead_owner = ARGV[2]
if redis.call('HGET', session, 'e') ~= '0' then return '-' end
local cur = redis.call('HGET', session, 'o')
if (not cur) or cur == dead_owner then
  redis.call('HSET', session, 'o', instance)
  return instance
end
return cur
