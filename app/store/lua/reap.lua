-- Take back jobs whose lease expired: requeue at the front (the lost attempt counts) or,
-- once attempts reach the maximum, fail them with worker-lost. One batch, atomically.
-- KEYS: 1 leases  2 queue  3 wake
-- ARGV: 1 cutoff ms ('' = server time)  2 max attempts  3 job key prefix  4 turns prefix
--       5 events prefix  6 failed result json  7 failed job_end data json  8 retention s
--       9 events maxlen  10 queued result json  11 batch size  12 wake cap
-- Returns {requeued ids, failed ids, number of expired leases looked at}
local now = now_ms()
local cutoff = now
if ARGV[1] ~= '' then
  cutoff = tonumber(ARGV[1])
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[11]))
local requeued, failed = {}, {}
-- Backwards, so that after the LPUSHes the longest-expired job is at the very front.
for i = #ids, 1, -1 do
  local id = ids[i]
  local job = ARGV[3] .. id
  redis.call('ZREM', KEYS[1], id)
  local f = redis.call('HMGET', job, 'status', 'attempts')
  if f[1] == 'in_progress' then
    local attempts = tonumber(f[2]) or 0
    if attempts >= tonumber(ARGV[2]) then
      redis.call('HSET', job, 'status', 'failed', 'result', ARGV[6], 'finished_ms', now)
      redis.call('HDEL', job, 'token')
      add_event(ARGV[5] .. id, ARGV[9], 'job_end', ARGV[7])
      expire_job(job, ARGV[4] .. id, ARGV[5] .. id, ARGV[8])
      table.insert(failed, id)
    else
      redis.call('HSET', job, 'status', 'queued', 'result', ARGV[10])
      redis.call('HDEL', job, 'token', 'owner')
      redis.call('LPUSH', KEYS[2], id)
      add_event(ARGV[5] .. id, ARGV[9], 'job_requeued',
        '{"attempt":' .. attempts .. ',"reason":"lease-expired"}')
      wake(KEYS[3], ARGV[12])
      table.insert(requeued, id)
    end
  end
end
return {requeued, failed, #ids}
