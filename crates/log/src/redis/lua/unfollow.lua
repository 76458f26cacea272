-- Drops members from a session's followers (`tail/bell.rs`: an instance
-- that follows a stream no more, or registered it again in the other
-- form): from its follower set, and from field `w` of its hash in the
-- seq-id layout (`seq_ids.lua`). Returns 0.
local session = KEYS[1]
local set = KEYS[2]
redis.call('SREM', set, unpack(ARGV))
local s = redis.call('HMGET', session, 'v', 'w')
if s[1] == '2' and s[2] then
  local drop = {}
  for _, m in ipairs(ARGV) do drop[m] = true end
  local w = w_keep(s[2], function(m) return drop[m] end)
  if w ~= s[2] then w_set(session, w) end
end
return 0
