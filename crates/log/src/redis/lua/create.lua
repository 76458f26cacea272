-- Creates a session unless its id exists (live or a tombstone); with
-- `layout` 2 in the seq-id layout (`seq_ids.lua`: no state hash for its
-- stream 0, whose head is the stream's own).
local session = KEYS[1]
local head_state = KEYS[2]
local live_set = KEYS[3]
local created_ms = ARGV[1]
local meta = ARGV[2]
local id = ARGV[3]
local layout = ARGV[4] or ''
if redis.call('EXISTS', session) == 1 then return -1 end
-- `x`: its request streams are indexed in `PREFIX:rs` (sessions of older
-- releases have no index: their streams are visited by number).
if layout == '2' then
  redis.call('HSET', session, 'c', created_ms, 'r', 1, 'e', 0, 'm', meta, 'a', created_ms, 'x', 1, 'v', 2)
else
  redis.call('HSET', session, 'c', created_ms, 'r', 1, 'e', 0, 'm', meta, 'a', created_ms, 'x', 1)
  redis.call('HSET', head_state, 'h', 0, 'f', 1, 'c', 0)
end
if live_set then redis.call('SADD', live_set, id) end
return 0
