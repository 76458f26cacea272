-- Forgets one tombstone, unless it ended after `cutoff_ms` (ended again
-- since it was listed) or is live. Without `ended_index` (a cluster,
-- where the ended index is in another slot) the caller checks the index first
-- and unlists the id after.
local session = KEYS[1]
local ended_index = KEYS[2]
local id = ARGV[1]
local cutoff_ms = ARGV[2]
if ended_index then
  local at = redis.call('ZSCORE', ended_index, id)
  if not at or tonumber(at) > tonumber(cutoff_ms) then return 0 end
end
if redis.call('HGET', session, 'e') == '1' then redis.call('DEL', session) end
if ended_index then redis.call('ZREM', ended_index, id) end
return 1
