-- A stream's committed head and floor, or why there are none.
-- With KEYS[3] (the session's follower set, mcpr:{SESSION}:f) and ARGV[1]
-- (this instance's member for the stream), a new reader's: the instance is
-- registered as the stream's follower in the same step, so every commit
-- after the head returned rings it (tail/join.rs). Only a live session's
-- existing stream is followed: no follower set is left behind for one
-- that ended.
local session = KEYS[1]
local state = KEYS[2]
if redis.call('HGET', session, 'e') ~= '0' then return {-1} end
local b = redis.call('HMGET', state, 'c', 'f')
if not b[1] then return {-2} end
local c, f = tonumber(b[1]), tonumber(b[2])
if f > c + 1 then f = c + 1 end
if KEYS[3] then redis.call('SADD', KEYS[3], ARGV[1]) end
return {c, f}
