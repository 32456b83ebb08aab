-- Hand a running job back (graceful drain): front of the queue, attempt not counted, fenced.
-- KEYS: 1 job  2 leases  3 queue  4 wake  5 events
-- ARGV: 1 id  2 token  3 queued result json  4 events maxlen  5 wake cap
if not fenced(KEYS[1], ARGV[2]) then
  return 0
end
local attempt = redis.call('HINCRBY', KEYS[1], 'attempts', -1) + 1
redis.call('HSET', KEYS[1], 'status', 'queued', 'result', ARGV[3])
redis.call('HDEL', KEYS[1], 'token', 'owner')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('LPUSH', KEYS[3], ARGV[1])
add_event(KEYS[5], ARGV[4], 'job_requeued', '{"attempt":' .. attempt .. ',"reason":"released"}')
wake(KEYS[4], ARGV[5])
return 1
