-- Hand a running job back (graceful drain): front of its tenant's queue, attempt given
-- back, fenced.
-- KEYS: 1 job  2 leases  3 tenant queue  4 ring  5 running counts
-- ARGV: 1 id  2 token  3 queued result json  4 work channel  5 shard
local f = redis.call('HMGET', KEYS[1], 'status', 'attempts', 'tenant', 'events', 'counted')
if not fenced(f, ARGV[2]) then
  return 0
end
local attempt = tonumber(f[2])
local requeued = event('job_requeued', '{"attempt":' .. attempt .. ',"reason":"released"}')
redis.call('HSET', KEYS[1], 'status', 'queued', 'attempts', attempt - 1, 'result', ARGV[3],
  'events', append(f[4], requeued), 'counted', '0')
uncount(KEYS[5], f[3], f[5])
redis.call('HDEL', KEYS[1], 'owner')
redis.call('ZREM', KEYS[2], ARGV[1])
requeue_front(KEYS[3], KEYS[4], f[3], ARGV[1])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
