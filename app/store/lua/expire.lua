-- Jobs of this shard whose requires_action expired go back to the front of their tenant's
-- queue with no outputs: the worker that resumes them ends them tool-timeout, or goes on
-- in must-return mode when the job asked for that (onToolTimeout), with the true spend.
-- Sent: app/store/protocol.py's ExpireKeys, ExpireArgs.
-- Returns {expired ids, number looked at}
local actions, ring = unpack(KEYS)
local job_prefix, queue_prefix, batch, requeued_event, queued_result, work_channel, shard,
  events_channel = unpack(ARGV)
local ids = redis.call('ZRANGEBYSCORE', actions, '-inf', now_ms(), 'LIMIT', 0, tonumber(batch))
local expired = {}
for i = #ids, 1, -1 do
  local id = ids[i]
  local job = job_prefix .. id
  redis.call('ZREM', actions, id)
  local f = redis.call('HMGET', job, 'status', 'tenant', 'events')
  if f[1] == 'requires_action' then
    redis.call('HSET', job, 'status', 'queued', 'outputs', 'timeout', 'result', queued_result,
      'events', append(f[3], requeued_event))
    redis.call('HDEL', job, 'action')
    requeue_front(queue_prefix .. f[2], ring, f[2], id)
    redis.call('PUBLISH', events_channel, id)
    table.insert(expired, id)
  end
end
if #expired > 0 then
  redis.call('PUBLISH', work_channel, shard)
end
return {expired, #ids}
