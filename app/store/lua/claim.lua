-- Lease up to n queued jobs of this shard to a worker, taking tenants in turn (round
-- robin over the ring), so one tenant's backlog never starves another's jobs. With a cap
-- on a tenant's running jobs (ARGV[6] > 0), a tenant at its cap is passed over: its jobs
-- wait, the other tenants' go.
-- KEYS: 1 ring  2 leases  3 running counts (hash: tenant → running jobs)
-- ARGV: 1 job key prefix  2 tenant queue prefix  3 worker id  4 lease ms  5 n
--       6 most running jobs per tenant (0: no cap)
-- Returns a flat list, 10 values per job:
--   id, attempt, spec, tenant, created_ms, model or '', spent by earlier attempts or '',
--   checkpoint or '' (a paused job resumes from it), outputs or '' (the client's answer,
--   or 'timeout'), the client's trace context or ''
local ring = KEYS[1]
-- The first two tenants say whether there are none, one or several (LLEN only then).
local head = redis.call('LRANGE', ring, 0, 1)
if #head == 0 then
  return {}
end
local tenants = #head
if tenants > 1 then
  tenants = redis.call('LLEN', ring)
end
local budget = tonumber(ARGV[5])
local cap = tonumber(ARGV[6])
local picked = {}  -- job ids, in the order they are taken

-- How many more jobs the tenant may start (nil: no cap).
local function room(tenant)
  if cap <= 0 then
    return nil
  end
  return cap - (tonumber(redis.call('HGET', KEYS[3], tenant)) or 0)
end

if tenants == 1 then
  -- One tenant waiting: take its jobs in one go.
  local tenant = head[1]
  local take = budget
  local left = room(tenant)
  if left then
    take = math.min(take, left)
  end
  if take > 0 then
    local ids = redis.call('LPOP', ARGV[2] .. tenant, take) or {}
    if #ids < take then
      redis.call('DEL', ring)  -- its queue is empty now
    end
    picked = ids
  end
else
  -- Several: one job per tenant per round. A tenant found with an empty queue (drained,
  -- or emptied by cancels) leaves the ring; one at its cap is passed over. Every pass
  -- takes a job, drops a tenant or passes one over, and passing every tenant over in a
  -- row ends the claim, so this ends.
  local passed = 0
  local taken = {}  -- per tenant, in this claim
  while budget > #picked and tenants > 0 and passed < tenants do
    local tenant = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
    local left = room(tenant)
    if left and left - (taken[tenant] or 0) <= 0 then
      passed = passed + 1
    else
      local id = redis.call('LPOP', ARGV[2] .. tenant)
      if id then
        table.insert(picked, id)
        taken[tenant] = (taken[tenant] or 0) + 1
        passed = 0
      else
        redis.call('RPOP', ring)  -- the tenant LMOVE just moved to the end
        tenants = tenants - 1
      end
    end
  end
end

local now = now_ms()
local lease_end = now + tonumber(ARGV[4])
local out, leased = {}, {}
for _, id in ipairs(picked) do
  local job = ARGV[1] .. id
  local f = redis.call('HMGET', job, 'status', 'attempts', 'spec', 'tenant', 'created_ms',
    'model', 'spent', 'events', 'started_ms', 'checkpoint', 'outputs', 'trace')
  if f[1] == 'queued' then
    local attempt = (tonumber(f[2]) or 0) + 1
    local events = append(f[8], event('job_start', '{"attempt":' .. attempt .. '}'))
    local fields = {'status', 'in_progress', 'attempts', attempt, 'owner', ARGV[3],
      'started_ms', f[9] or now, 'events', events}
    if cap > 0 then
      redis.call('HINCRBY', KEYS[3], f[4], 1)
      table.insert(fields, 'counted')
      table.insert(fields, 1)
    end
    redis.call('HSET', job, unpack(fields))
    table.insert(leased, lease_end)
    table.insert(leased, id)
    for _, v in ipairs({id, attempt, f[3], f[4], f[5], f[6] or '', f[7] or '', f[10] or '',
        f[11] or '', f[12] or ''}) do
      table.insert(out, v)
    end
  end
end
if #leased > 0 then
  redis.call('ZADD', KEYS[2], unpack(leased))
end
return out
