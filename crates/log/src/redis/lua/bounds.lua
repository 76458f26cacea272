-- A stream's committed head and floor, and its layout (1: ids `SEQ-0`,
-- the heads in the stream's state hash; 2: seq ids, `seq_ids.lua`), or why
-- there are none: `{-1}` no live session, `{-2}` no stream, `{-6}` a
-- request stream an older release opened in a seq-id session.
-- With ARGV[2] (this instance's member for the stream) and KEYS[4] (the
-- session's follower set, mcpr:{SESSION}:f), a new reader's: the instance
-- is registered as the stream's follower in the same step (in field `w`
-- of the session's hash in the seq-id layout), so every commit after the
-- head returned rings it (tail/join.rs). Only a live session's existing
-- stream is followed: no follower set is left behind for one that ended.
local session = KEYS[1]
local state = KEYS[2]
local events = KEYS[3]
local stream = ARGV[1]
local member = ARGV[2]
local s = redis.call('HMGET', session, 'e', 'v', 'w')
if s[1] ~= '0' then return {-1} end
if s[2] == '2' then
  if stream ~= '0' then
    local st, why = seq_request_state(state)
    if not st then return {why} end
  end
  local h, f = seq_bounds(events)
  if member then
    local w = w_add(s[3], member)
    if w ~= s[3] then redis.call('HSET', session, 'w', w) end
  end
  return {h, f, 2}
end
local b = redis.call('HMGET', state, 'c', 'f')
if not b[1] then return {-2} end
local c, f = tonumber(b[1]), tonumber(b[2])
if f > c + 1 then f = c + 1 end
if member then redis.call('SADD', KEYS[4], member) end
return {c, f, 1}
