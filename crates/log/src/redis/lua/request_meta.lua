-- A request stream's record: `{0, meta}`, or `{-1}` no session, `{-2}` no
-- stream, `{-3, c, f}` retention took it with the events, `{-6}` a request
-- stream an older release opened in a seq-id session.
local session = KEYS[1]
local state = KEYS[2]
local events = KEYS[3]
local s = redis.call('HMGET', session, 'e', 'v')
if s[1] ~= '0' then return {-1} end
if s[2] == '2' then
  -- Seq ids (`seq_ids.lua`): `x` alone, a stream retention emptied.
  local b, why = seq_request_state(state)
  if not b then return {why} end
  if b[1] then return {0, b[1]} end
  local h, f = seq_bounds(events)
  return {-3, h, f}
end
local b = redis.call('HMGET', state, 'c', 'f', 'm')
if not b[1] then return {-2} end
if not b[3] then return {-3, tonumber(b[1]), tonumber(b[2])} end
return {0, b[3]}
