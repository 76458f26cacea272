-- Adds a member to a live session's set: a follower registered again by
-- `tail/bell.rs` (a resync, a reform), never after the session's end, which
-- deleted the set and would not delete it again (in the seq-id layout, to
-- field `w` of the session's hash, `seq_ids.lua`). Returns 1 added, 0
-- there already, -1 no live session.
local session = KEYS[1]
local set = KEYS[2]
local s = redis.call('HMGET', session, 'e', 'v', 'w')
if s[1] ~= '0' then return -1 end
if s[2] == '2' then
  local w = w_add(s[3], ARGV[1])
  if w == s[3] then return 0 end
  redis.call('HSET', session, 'w', w)
  return 1
end
return redis.call('SADD', set, ARGV[1])
