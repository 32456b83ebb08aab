-- The client answers a job's requires_action: its outputs are kept with the job and the job
-- goes back to the front of its tenant's queue, where a worker resumes it from its
-- checkpoint. The same body again (a retried POST) answers 'existing'; another body, or a
-- job that is not waiting for this pause's outputs, 'state'.
-- KEYS: 1 job  2 tenant queue  3 ring  4 actions
-- ARGV: 1 id  2 tenant  3 outputs json  4 body digest  5 the pause the outputs answer
--       6 event json  7 queued result json  8 work channel  9 shard  10 events channel
-- Returns {'queued'} | {'existing'} | {'missing'} | {'state', status}
local f = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'events', 'answered', 'pauses')
if not f[1] or f[2] ~= ARGV[2] then
  return {'missing'}
end
local answered = f[4] or ''
if string.find(' ' .. answered .. ' ', ' ' .. ARGV[4] .. ' ', 1, true) then
  return {'existing'}
end
if f[1] ~= 'requires_action' or f[5] ~= ARGV[5] then
  return {'state', f[1]}
end
-- The digests of accepted bodies, one per pause (a job pauses at most once per work turn).
if answered ~= '' then
  answered = answered .. ' '
end
redis.call('HSET', KEYS[1], 'status', 'queued', 'outputs', ARGV[3], 'result', ARGV[7],
  'events', append(f[3], ARGV[6]), 'answered', answered .. ARGV[4])
redis.call('HDEL', KEYS[1], 'action')
redis.call('ZREM', KEYS[4], ARGV[1])
requeue_front(KEYS[2], KEYS[3], ARGV[2], ARGV[1])
redis.call('PUBLISH', ARGV[8], ARGV[9])
redis.call('PUBLISH', ARGV[10], ARGV[1])
return {'queued'}
