-- Lists as ended at `ARGV[1]`, in the ended index `KEYS[1]`, each tombstone
-- `KEYS[i]` (id `ARGV[i]`, i > 1) not listed yet: one an older version left
-- without an end time. An end time already listed is kept (`NX`), and a
-- live session or a key that is no session hash is left alone.
local n = 0
for i = 2, #KEYS do
  local e = redis.pcall('HGET', KEYS[i], 'e')
  if e == '1' then
    n = n + redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[i])
  end
end
return n
