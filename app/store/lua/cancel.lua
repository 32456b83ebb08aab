-- Cancel a job of this tenant. Terminal jobs stay as they are.
-- Sent: app/store/protocol.py's CancelKeys, CancelArgs.
-- Returns 'missing' | 'unchanged' | 'cancelled'
local job, tenant_queue, ring, leases, running, actions = unpack(KEYS)
local id, tenant, result, job_end, retention_s, done_channel, cancel_channel,
  finished_ms = unpack(ARGV)
local f = redis.call('HMGET', job, 'status', 'tenant', 'events', 'counted')
if not f[1] or f[2] ~= tenant then
  return 'missing'
end
local status = f[1]
if status ~= 'queued' and status ~= 'in_progress' and status ~= 'requires_action' then
  return 'unchanged'
end
if status == 'queued' then
  redis.call('LREM', tenant_queue, 1, id)
  if redis.call('EXISTS', tenant_queue) == 0 then
    redis.call('LREM', ring, 0, tenant)  -- the ring holds tenants with queued jobs only
  end
elseif status == 'requires_action' then
  redis.call('ZREM', actions, id)
  redis.call('HDEL', job, 'action')
else
  redis.call('ZREM', leases, id)
  uncount(running, f[2], f[4])
end
-- Status leaves in_progress here, so every later write under the old claim is refused.
finish(job, id, 'cancelled', result, append(f[3], job_end), finished_ms, retention_s,
  done_channel, {'counted', '0'})
if status == 'in_progress' then
  redis.call('PUBLISH', cancel_channel, id)
end
return 'cancelled'
