-- Append a turn record and the in-progress result, fenced. KEYS: 1 job  2 turns.
-- ARGV: 1 token  2 turn json  3 in-progress result json
if not fenced(KEYS[1], ARGV[1]) then
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[1], 'result', ARGV[3])
return 1
