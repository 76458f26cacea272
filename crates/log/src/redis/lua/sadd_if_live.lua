-- Adds a member to a live session's set (a follower registration made
-- again, `tail/bell.rs`): an ended session's set is not made again, which
-- nothing would delete. KEYS[1] the session's hash, KEYS[2] the set.
if redis.call('HGET', KEYS[1], 'e') ~= '0' then return 0 end
return redis.call('SADD', KEYS[2], ARGV[1])
