-- Cancel a job of this tenant. Terminal jobs stay as they are.
-- KEYS: 1 job  2 queue  3 leases  4 turns  5 events
-- ARGV: 1 id  2 tenant  3 cancelled result json  4 job_end data json  5 retention s
--       6 events maxlen  7 cancel channel
-- Returns 'missing' | 'unchanged' | 'cancelled'
local f = redis.call('HMGET', KEYS[1], 'status', 'tenant')
if not f[1] or f[2] ~= ARGV[2] then
  return 'missing'
end
local status = f[1]
if status ~= 'queued' and status ~= 'in_progress' then
  return 'unchanged'
end
if status == 'queued' then
  redis.call('LREM', KEYS[2], 0, ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
-- Status leaves in_progress here, so every later write under the old token is refused.
redis.call('HSET', KEYS[1], 'status', 'cancelled', 'result', ARGV[3], 'finished_ms', now_ms())
redis.call('HDEL', KEYS[1], 'token')
add_event(KEYS[5], ARGV[6], 'job_end', ARGV[4])
expire_job(KEYS[1], KEYS[4], KEYS[5], ARGV[5])
if status == 'in_progress' then
  redis.call('PUBLISH', ARGV[7], ARGV[1])
end
return 'cancelled'
