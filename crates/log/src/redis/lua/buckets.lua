-- Claims and releases maintenance buckets in the lease hash (field: the
-- bucket number, value: the instance that maintains it; `buckets.rs`) and
-- returns the buckets `instance` holds after.
-- ARGV: instance, the number of claims N, N pairs (bucket, the holder the
-- caller saw dead or '' for none), then the buckets to release.
-- A claim takes a bucket only if its holder is still the one seen (compare
-- and set: two instances claiming at once cannot both win); a release drops
-- only a bucket `instance` still holds.
local leases = KEYS[1]
local instance = ARGV[1]
local n = tonumber(ARGV[2])
for i = 0, n - 1 do
  local bucket, seen = ARGV[3 + 2 * i], ARGV[4 + 2 * i]
  local cur = redis.call('HGET', leases, bucket)
  if (not cur and seen == '') or cur == seen then
    redis.call('HSET', leases, bucket, instance)
  end
end
for i = 3 + 2 * n, #ARGV do
  if redis.call('HGET', leases, ARGV[i]) == instance then
    redis.call('HDEL', leases, ARGV[i])
  end
end
local held = {}
local all = redis.call('HGETALL', leases)
for i = 1, #all, 2 do
  if all[i + 1] == instance then
    table.insert(held, tonumber(all[i]))
  end
end
return held
