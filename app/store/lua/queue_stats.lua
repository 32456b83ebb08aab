-- Queue depth and the age (ms) of the job at the front, which is the oldest queued one.
-- KEYS: 1 queue.  ARGV: 1 job key prefix.  Returns {depth, age ms}
local depth = redis.call('LLEN', KEYS[1])
if depth == 0 then
  return {0, 0}
end
local created = redis.call('HGET', ARGV[1] .. redis.call('LINDEX', KEYS[1], 0), 'created_ms')
if not created then
  return {depth, 0}
end
return {depth, math.max(0, now_ms() - tonumber(created))}
