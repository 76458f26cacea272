-- Pins stream `n` of a live session at `seq` until `expiry_ms`, as pin
-- `pin` in the session's pin hash, in one step with the check that the
-- session and the stream exist: a session ended meanwhile leaves no pin
-- hash behind (ending it deletes the hash; a pin set after would stay).
-- Returns 0, or -1 no live session, -2 no stream.
local session = KEYS[1]
local stream_state = KEYS[2]
local pins = KEYS[3]
local pin = ARGV[1]
local value = ARGV[2]
local s = redis.call('HMGET', session, 'e', 'v')
if s[1] ~= '0' then return -1 end
if s[2] == '2' then
  -- Seq ids (`seq_ids.lua`): stream 0 has no state hash, and `p` sends
  -- the appends that may trim to the pins (`append.lua`).
  if string.sub(stream_state, -5) ~= ':st:0' and redis.call('EXISTS', stream_state) == 0 then
    return -2
  end
  redis.call('HSET', session, 'p', 1)
elseif redis.call('EXISTS', stream_state) == 0 then
  return -2
end
redis.call('HSET', pins, pin, value)
return 0
