-- Retires request stream `n` of a live session: its state, record and
-- events go and it leaves the index; its number is not handed out again.
-- The instances registered as its followers (`WAKE|STREAM` members of the
-- follower set, or compact ones: a 12-digit nonce then the stream's number)
-- are forgotten with it, so the set does not grow with every
-- call a long-lived session makes.
-- Returns 0, or -1 for no live session.
local session = KEYS[1]
local stream_state = KEYS[2]
local events = KEYS[3]
local index = KEYS[4]
local followers = KEYS[5]
local n = ARGV[1]
local s = redis.call('HMGET', session, 'e', 'v', 'w')
if s[1] ~= '0' then return -1 end
redis.call('DEL', stream_state, events)
redis.call('SREM', index, n)
local suffix = '|' .. events
local function its(m)
  return string.sub(m, -#suffix) == suffix or string.match(m, '^%d%d%d%d%d%d%d%d%d%d%d%d(%d+)$') == n
end
if s[2] == '2' then
  -- Seq ids (`seq_ids.lua`): the followers are field `w`.
  if s[3] then
    local w = w_keep(s[3], its)
    if w ~= s[3] then w_set(session, w) end
  end
else
  for _, m in ipairs(redis.call('SMEMBERS', followers)) do
    if its(m) then redis.call('SREM', followers, m) end
  end
end
return 0
