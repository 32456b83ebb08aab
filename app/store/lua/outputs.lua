-- The client answers a job's requires_action: its outputs are kept with the job and the job
-- goes back to the front of its tenant's queue, where a worker resumes it from its
-- checkpoint. The same body again (a retried POST) answers 'existing'; another body, or a
-- job that is not waiting for this pause's outputs, 'state'.
-- Sent: app/store/protocol.py's OutputsKeys, OutputsArgs.
-- Past the pause's expiresAt (its score in ``actions``) the outputs are refused at once,
-- 'expired', even before the reaper's next pass requeues the job without them.
-- Returns {'queued'} | {'existing'} | {'missing'} | {'state', status} | {'expired'}
local job, tenant_queue, ring, actions = unpack(KEYS)
local id, tenant, outputs, digest, pause, outputs_event, queued_result, work_channel, shard,
  events_channel = unpack(ARGV)
local f = redis.call('HMGET', job, 'status', 'tenant', 'events', 'answered', 'pauses')
if not f[1] or f[2] ~= tenant then
  return {'missing'}
end
local answered = f[4] or ''
if string.find(' ' .. answered .. ' ', ' ' .. digest .. ' ', 1, true) then
  return {'existing'}
end
if f[1] ~= 'requires_action' or f[5] ~= pause then
  return {'state', f[1]}
end
local due = redis.call('ZSCORE', actions, id)
if due and tonumber(due) <= now_ms() then
  return {'expired'}
end
-- The digests of accepted bodies, one per pause (a job pauses at most once per work turn).
if answered ~= '' then
  answered = answered .. ' '
end
redis.call('HSET', job, 'status', 'queued', 'outputs', outputs, 'result', queued_result,
  'events', append(f[3], outputs_event), 'answered', answered .. digest)
redis.call('HDEL', job, 'action')
redis.call('ZREM', actions, id)
requeue_front(tenant_queue, ring, tenant, id)
redis.call('PUBLISH', work_channel, shard)
redis.call('PUBLISH', events_channel, id)
return {'queued'}
