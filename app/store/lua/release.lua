-- Hand a running job back (graceful drain): front of its tenant's queue, attempt given
-- back, fenced.
-- Sent: app/store/protocol.py's ReleaseKeys, ReleaseArgs.
local job, leases, tenant_queue, ring, running = unpack(KEYS)
local id, token, queued_result, work_channel, shard = unpack(ARGV)
local f = redis.call('HMGET', job, 'status', 'attempts', 'tenant', 'events', 'counted')
if not fenced(f, token) then
  return 0
end
local attempt = tonumber(f[2])
local requeued = event('job_requeued', '{"attempt":' .. attempt .. ',"reason":"released"}')
redis.call('HSET', job, 'status', 'queued', 'attempts', attempt - 1, 'result',
  queued_result, 'events', append(f[4], requeued), 'counted', '0')
uncount(running, f[3], f[5])
redis.call('HDEL', job, 'owner')
redis.call('ZREM', leases, id)
requeue_front(tenant_queue, ring, f[3], id)
redis.call('PUBLISH', work_channel, shard)
return 1
