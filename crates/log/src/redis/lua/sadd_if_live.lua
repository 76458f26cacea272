-- Adds a member to a live session's set: a follower registered again by
-- `tail/bell.rs` (a resync, a reform), never after the session's end, which
-- deleted the set and would not delete it again. Returns 1 added, 0 there
-- already, -1 no live session.
local session = KEYS[1]
local set = KEYS[2]
if redis.call('HGET', session, 'e') ~= '0' then return -1 end
return redis.call('SADD', set, ARGV[1])
