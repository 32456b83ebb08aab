-- Cancel a job of this tenant. Terminal jobs stay as they are.
-- KEYS: 1 job  2 tenant queue  3 ring  4 leases  5 running counts  6 actions
-- ARGV: 1 id  2 tenant  3 cancelled result json  4 job_end event json  5 retention s
--       6 done channel  7 cancel channel  8 finished ms
-- Returns 'missing' | 'unchanged' | 'cancelled'
local f = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'events', 'counted')
if not f[1] or f[2] ~= ARGV[2] then
  return 'missing'
end
local status = f[1]
if status ~= 'queued' and status ~= 'in_progress' and status ~= 'requires_action' then
  return 'unchanged'
end
if status == 'queued' then
  redis.call('LREM', KEYS[2], 1, ARGV[1])
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('LREM', KEYS[3], 0, ARGV[2])  -- the ring holds tenants with queued jobs only
  end
elseif status == 'requires_action' then
  redis.call('ZREM', KEYS[6], ARGV[1])
  redis.call('HDEL', KEYS[1], 'action')
else
  redis.call('ZREM', KEYS[4], ARGV[1])
  uncount(KEYS[5], f[2], f[4])
end
-- Status leaves in_progress here, so every later write under the old claim is refused.
finish(KEYS[1], ARGV[1], 'cancelled', ARGV[3], append(f[3], ARGV[4]), ARGV[8], ARGV[5],
  ARGV[6], {'counted', '0'})
if status == 'in_progress' then
  redis.call('PUBLISH', ARGV[7], ARGV[1])
end
return 'cancelled'
