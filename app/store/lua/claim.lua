-- Take the job at the front of the queue and lease it to a worker.
-- KEYS: 1 queue  2 leases  3 fence counter
-- ARGV: 1 job key prefix  2 events key prefix  3 worker id  4 lease ms  5 events maxlen
-- Returns {id, token, attempt, spec, tenant, created_ms, model or nil} or nil when nothing is queued.
-- Ids whose job is no longer queued (cancelled, expired) are dropped on the way.
for _ = 1, 1000 do
  local id = redis.call('LPOP', KEYS[1])
  if not id then
    return false
  end
  local job = ARGV[1] .. id
  if redis.call('HGET', job, 'status') == 'queued' then
    local now = now_ms()
    local token = redis.call('INCR', KEYS[3])
    local attempt = redis.call('HINCRBY', job, 'attempts', 1)
    redis.call('HSET', job, 'status', 'in_progress', 'token', token, 'owner', ARGV[3])
    redis.call('HSETNX', job, 'started_ms', now)
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), id)
    add_event(ARGV[2] .. id, ARGV[5], 'job_start', '{"attempt":' .. attempt .. '}')
    local f = redis.call('HMGET', job, 'spec', 'tenant', 'created_ms', 'model')
    return {id, token, attempt, f[1], f[2], f[3], f[4]}
  end
end
return false
