-- Take back this shard's jobs whose lease expired: requeue at the front of their tenant's
-- queue (the lost attempt counts) or, once attempts reach the maximum, fail them with
-- worker-lost. One batch, atomically.
-- KEYS: 1 leases  2 ring  3 running counts
-- ARGV: 1 cutoff ms ('' = server time)  2 max attempts  3 job key prefix
--       4 tenant queue prefix  5 failed result json  6 failed job_end event json
--       7 retention s  8 queued result json  9 batch size  10 done channel
--       11 work channel  12 shard
-- Returns {requeued ids, failed ids, number of expired leases looked at}
local now = now_ms()
local cutoff = now
if ARGV[1] ~= '' then
  cutoff = tonumber(ARGV[1])
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[9]))
local requeued, failed = {}, {}
-- Backwards, so that after the LPUSHes the longest-expired job is at the very front.
for i = #ids, 1, -1 do
  local id = ids[i]
  local job = ARGV[3] .. id
  redis.call('ZREM', KEYS[1], id)
  local f = redis.call('HMGET', job, 'status', 'attempts', 'tenant', 'events', 'counted')
  if f[1] == 'in_progress' then
    uncount(KEYS[3], f[3], f[5])
    local attempts = tonumber(f[2]) or 0
    if attempts >= tonumber(ARGV[2]) then
      finish(job, id, 'failed', ARGV[5], append(f[4], ARGV[6]), now, ARGV[7], ARGV[10],
        {'counted', '0'})
      table.insert(failed, id)
    else
      local requeue = event('job_requeued',
        '{"attempt":' .. attempts .. ',"reason":"lease-expired"}')
      redis.call('HSET', job, 'status', 'queued', 'result', ARGV[8],
        'events', append(f[4], requeue), 'counted', '0')
      redis.call('HDEL', job, 'owner')
      requeue_front(ARGV[4] .. f[3], KEYS[2], f[3], id)
      table.insert(requeued, id)
    end
  end
end
if #requeued > 0 then
  redis.call('PUBLISH', ARGV[11], ARGV[12])
end
return {requeued, failed, #ids}
