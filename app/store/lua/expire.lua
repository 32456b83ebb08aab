-- Jobs of this shard whose requires_action expired go back to the front of their tenant's
-- queue with no outputs: the worker that resumes them ends them tool-timeout, or goes on
-- in must-return mode when the job asked for that (onToolTimeout), with the true spend.
-- KEYS: 1 actions  2 ring
-- ARGV: 1 job key prefix  2 tenant queue prefix  3 batch size  4 event json
--       5 queued result json  6 work channel  7 shard  8 events channel
-- Returns {expired ids, number looked at}
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[3]))
local expired = {}
for i = #ids, 1, -1 do
  local id = ids[i]
  local job = ARGV[1] .. id
  redis.call('ZREM', KEYS[1], id)
  local f = redis.call('HMGET', job, 'status', 'tenant', 'events')
  if f[1] == 'requires_action' then
    redis.call('HSET', job, 'status', 'queued', 'outputs', 'timeout', 'result', ARGV[5],
      'events', append(f[3], ARGV[4]))
    redis.call('HDEL', job, 'action')
    requeue_front(ARGV[2] .. f[2], KEYS[2], f[2], id)
    redis.call('PUBLISH', ARGV[8], id)
    table.insert(expired, id)
  end
end
if #expired > 0 then
  redis.call('PUBLISH', ARGV[6], ARGV[7])
end
return {expired, #ids}
