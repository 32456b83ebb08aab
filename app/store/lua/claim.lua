-- Lease up to n queued jobs of this shard to a worker, taking tenants in turn (round
-- robin over the ring), so one tenant's backlog never starves another's jobs.
-- KEYS: 1 ring  2 leases
-- ARGV: 1 job key prefix  2 tenant queue prefix  3 worker id  4 lease ms  5 n
-- Returns a flat list, 7 values per job:
--   id, attempt, spec, tenant, created_ms, model or '', spent by earlier attempts or ''
local now = now_ms()
local lease_end = now + tonumber(ARGV[4])
local out, leased = {}, {}
local budget = tonumber(ARGV[5])
-- Every pass either leases a job or drops an empty tenant from the ring, so this ends.
while budget > 0 do
  local tenant = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
  if not tenant then
    break
  end
  local queue = ARGV[2] .. tenant
  local id = redis.call('LPOP', queue)
  if redis.call('LLEN', queue) == 0 then
    redis.call('RPOP', KEYS[1])  -- the tenant just moved there
  end
  if id then
    local job = ARGV[1] .. id
    local f = redis.call('HMGET', job, 'status', 'attempts', 'spec', 'tenant', 'created_ms',
      'model', 'spent', 'events', 'started_ms')
    if f[1] == 'queued' then
      local attempt = (tonumber(f[2]) or 0) + 1
      local events = append(f[8], event('job_start', '{"attempt":' .. attempt .. '}'))
      redis.call('HSET', job, 'status', 'in_progress', 'attempts', attempt, 'owner', ARGV[3],
        'started_ms', f[9] or now, 'events', events)
      table.insert(leased, lease_end)
      table.insert(leased, id)
      for _, v in ipairs({id, attempt, f[3], f[4], f[5], f[6] or '', f[7] or ''}) do
        table.insert(out, v)
      end
      budget = budget - 1
    end
  end
end
if #leased > 0 then
  redis.call('ZADD', KEYS[2], unpack(leased))
end
return out
