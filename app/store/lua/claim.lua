-- Lease up to ``wanted`` queued jobs of this shard to a worker, taking tenants in turn (round
-- robin over the ring), so one tenant's backlog never starves another's jobs. With a cap
-- on a tenant's running jobs (``max_in_flight`` > 0), a tenant at its cap is passed over:
-- its jobs wait, the other tenants' go. Sent: app/store/protocol.py's ClaimKeys, ClaimArgs
-- (``running``: tenant → running jobs; ``listed_as`` '': not to be listed, ``held_entry``
-- dropped).
-- Returns a flat list, 10 values per job:
--   id, attempt, spec, tenant, created_ms, model or '', spent by earlier attempts or '',
--   checkpoint or '' (a paused job resumes from it), outputs or '' (the client's answer,
--   or 'timeout'), the client's trace context or ''
-- and then, when the claimer's registration changed: its new entry and how many copies
-- of it were listed, or one value, '' (it has none now).
--
-- The idle list: a claimer with a wake token whose claim comes back short (this shard's
-- queues ran dry before ``wanted`` jobs) has slots to spare and waits for work: it registers,
-- "<token>/<lease ms>/<cap>/<worker id> <ms>" (the server's clock), so that a submit hands
-- it the job, claimed for it in the submit's own script, or wakes it alone (lua/submit.lua).
-- It is listed once per slot it has to spare, up to ``max_copies`` copies: each hand-off takes a
-- copy, and the job's commit puts it back (lua/complete.lua), so under load every job can
-- be handed over, and a worker is never handed more jobs at once than it offered (one that
-- hangs strands no more); a claim that takes jobs takes as many copies off. It stays
-- registered across claims (no command per claim that takes none), renews
-- the entry now and then so a submit can tell it from a dead worker's (every copy, as many
-- as it has room for then), and leaves when a claim fills every slot it asked for (a busy
-- worker claims as soon as a slot frees, without a wake-up) or when it has no free slot
-- left (``Leases.leave``).
--
-- The ring holds exactly the tenants whose queue is not empty, each once (submit and
-- requeue_front add a tenant when its queue goes from empty to one job, cancel drops it
-- when it empties its queue). A claim pops the tenants it serves off the ring's front and
-- puts those that still have jobs back at its end, so the next claim starts with the
-- tenants this one did not reach: one job per tenant per round, across claims too.
-- A tenant found with an empty queue, or twice (a ring written before the invariant
-- held), is dropped, so the ring heals.
local ring, leases, running, idle = unpack(KEYS)
local job_prefix, queue_prefix, worker_id, lease_ms, wanted, max_in_flight, listed_as,
  held_entry, renew, work_channel, shard, stale_ms, exact_publish, max_copies = unpack(ARGV)
local left = tonumber(wanted)
local cap = tonumber(max_in_flight)

local order = {}   -- tenants popped off the ring, in ring order
local seen = {}    -- tenant → {ids = taken, room = jobs it may still start or nil, open}
local exhausted = false

-- Take up to want jobs of a tenant (one LPOP). A short answer means its queue is empty.
local function take(tenant, want)
  local t = seen[tenant]
  if t.room then
    want = math.min(want, t.room)
  end
  local ids = redis.call('LPOP', queue_prefix .. tenant, want) or {}
  for _, id in ipairs(ids) do
    table.insert(t.ids, id)
  end
  left = left - #ids
  if t.room then
    t.room = t.room - #ids
  end
  if #ids < want then
    t.open = false  -- its queue is empty: it stays off the ring
  end
end

while left > 0 do
  if not exhausted then
    -- The next tenants of this round: as many as jobs still wanted.
    local popped = redis.call('LPOP', ring, left)
    if not popped then
      popped = {}
    end
    if #popped < left then
      exhausted = true  -- every tenant with queued jobs is in hand now
    end
    for _, tenant in ipairs(popped) do
      if not seen[tenant] then
        local room = nil
        if cap > 0 then
          room = cap - (tonumber(redis.call('HGET', running, tenant)) or 0)
        end
        seen[tenant] = {ids = {}, room = room, open = true}
        table.insert(order, tenant)
      end
    end
  end
  -- Fill level by level: the tenants with the fewest jobs taken in this claim get more
  -- first (one per round, several rounds in one LPOP when the budget allows).
  local active = {}  -- tenants that may give more jobs now, in ring order
  local low, high = nil, nil
  for _, tenant in ipairs(order) do
    local t = seen[tenant]
    if t.open and (not t.room or t.room > 0) then
      table.insert(active, tenant)
      local n = #t.ids
      if not low or n < low then
        high, low = low, n
      elseif n > low and (not high or n < high) then
        high = n
      end
    end
  end
  if #active == 0 or (not exhausted and low > 0) then
    -- Nobody to take from in this round: the next tenants of the ring, or done.
    if exhausted then
      break
    end
  else
    local level = {}
    for _, tenant in ipairs(active) do
      if #seen[tenant].ids == low then
        table.insert(level, tenant)
      end
    end
    local rounds = math.floor(left / #level)
    if high then
      rounds = math.min(rounds, high - low)
    end
    if not exhausted then
      rounds = math.min(rounds, 1)  -- the tenants still on the ring come next, not round 2
    end
    if rounds >= 1 then
      for _, tenant in ipairs(level) do
        take(tenant, rounds)
      end
    else  -- fewer jobs wanted than tenants at this level: the first ones get one each
      for _, tenant in ipairs(level) do
        if left == 0 then
          break
        end
        take(tenant, 1)
      end
    end
  end
end

-- Back to the ring's end, those that may still have jobs, in the order a job-by-job round
-- robin would leave them: served fewest times first, then in ring order.
local back = {}
for i, tenant in ipairs(order) do
  local t = seen[tenant]
  if t.open and redis.call('LLEN', queue_prefix .. tenant) > 0 then
    table.insert(back, {#t.ids, i, tenant})
  end
end
if #back > 0 then
  table.sort(back, function(a, b)
    return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
  end)
  local names = {}
  for _, entry in ipairs(back) do
    table.insert(names, entry[3])
  end
  redis.call('RPUSH', ring, unpack(names))
end

-- The jobs, round by round: each tenant's first, then each one's second, and so on.
local picked = {}
local round = 1
repeat
  local any = false
  for _, tenant in ipairs(order) do
    local id = seen[tenant].ids[round]
    if id then
      table.insert(picked, id)
      any = true
    end
  end
  round = round + 1
until not any
local now = nil
local registered = nil  -- the claimer's new registration, when it changed
local copies = 0
if listed_as ~= '' then
  if left > 0 then
    if held_entry == '' or renew == '1' then
      if held_entry ~= '' then
        redis.call('LREM', idle, 0, held_entry)
      end
      now = now_ms()
      registered = listed_as .. ' ' .. string.format('%d', now)
      copies = math.min(left, tonumber(max_copies))
      local entries = {}
      for i = 1, copies do
        entries[i] = registered
      end
      redis.call('RPUSH', idle, unpack(entries))
    elseif #picked > 0 and tonumber(max_copies) > 1 then  -- as many copies off as slots
      redis.call('LREM', idle, #picked, held_entry)   -- these jobs take (one: a cluster's)
    end
  elseif held_entry ~= '' then
    redis.call('LREM', idle, 0, held_entry)
    registered = ''
  end
elseif held_entry ~= '' then  -- the claimer is not to be listed any more (it works alone)
  redis.call('LREM', idle, 0, held_entry)
  registered = ''
end

-- The registration's values after the jobs': the entry and its copies, or '' alone.
local function registration(out)
  if registered == '' then
    table.insert(out, '')
  elseif registered then
    table.insert(out, registered)
    table.insert(out, copies)
  end
  return out
end

if #picked == 0 then
  return registration({})
end

now = now or now_ms()
-- As strings, formatted once: a Lua number is formatted (%.14g) for each command it is in.
local lease_end = string.format('%d', now + tonumber(lease_ms))
local started = string.format('%d', now)
local out, leased = {}, {}
for _, id in ipairs(picked) do
  local job = job_prefix .. id
  local f = redis.call('HMGET', job, 'status', 'attempts', 'spec', 'tenant', 'created_ms',
    'model', 'spent', 'events', 'started_ms', 'checkpoint', 'outputs', 'trace')
  if f[1] == 'queued' then
    local attempt, fields = claimed(f[2], f[8], f[9], worker_id, started, running, f[4], cap)
    redis.call('HSET', job, unpack(fields))
    table.insert(leased, lease_end)
    table.insert(leased, id)
    for _, v in ipairs(claim_reply(id, attempt, f[3], f[4], f[5], f[6], f[7], f[10], f[11],
        f[12])) do
      table.insert(out, v)
    end
  end
end
if #leased > 0 then
  redis.call('ZADD', leases, unpack(leased))
end
-- Hand the wake-up on: this claim took all it asked for and left jobs queued. A submit
-- wakes one worker, and a job queued behind another wakes nobody (lua/submit.lua), so the
-- jobs this claim had no room for would wait for a slot to free here: one other idle
-- worker is told (none when every worker is busy: a freed slot claims at once).
if left == 0 and #back > 0 and work_channel and work_channel ~= '' then
  wake_listed(idle, work_channel, shard, now, tonumber(stale_ms), exact_publish == '1')
end
return registration(out)
