-- Take back this shard's jobs whose lease expired: requeue at the front of their tenant's
-- queue (the lost attempt counts) or, once attempts reach the maximum, fail them with
-- worker-lost. One batch, atomically.
-- Sent: app/store/protocol.py's ReapKeys, ReapArgs.
-- Returns {requeued ids, failed ids, number of expired leases looked at}
local leases, ring, running = unpack(KEYS)
local cutoff_ms, max_attempts, job_prefix, queue_prefix, failed_result, failed_event,
  retention_s, queued_result, batch, done_channel, work_channel, shard = unpack(ARGV)
local now = now_ms()
local cutoff = now
if cutoff_ms ~= '' then
  cutoff = tonumber(cutoff_ms)
end
local ids = redis.call('ZRANGEBYSCORE', leases, '-inf', cutoff, 'LIMIT', 0, tonumber(batch))
local requeued, failed = {}, {}
-- Backwards, so that after the LPUSHes the longest-expired job is at the very front.
for i = #ids, 1, -1 do
  local id = ids[i]
  local job = job_prefix .. id
  redis.call('ZREM', leases, id)
  local f = redis.call('HMGET', job, 'status', 'attempts', 'tenant', 'events', 'counted')
  if f[1] == 'in_progress' then
    uncount(running, f[3], f[5])
    local attempts = tonumber(f[2]) or 0
    if attempts >= tonumber(max_attempts) then
      finish(job, id, 'failed', failed_result, append(f[4], failed_event), now, retention_s,
        done_channel, {'counted', '0'})
      table.insert(failed, id)
    else
      local requeue = event('job_requeued',
        '{"attempt":' .. attempts .. ',"reason":"lease-expired"}')
      redis.call('HSET', job, 'status', 'queued', 'result', queued_result,
        'events', append(f[4], requeue), 'counted', '0')
      redis.call('HDEL', job, 'owner')
      requeue_front(queue_prefix .. f[3], ring, f[3], id)
      table.insert(requeued, id)
    end
  end
end
if #requeued > 0 then
  redis.call('PUBLISH', work_channel, shard)
end
return {requeued, failed, #ids}
