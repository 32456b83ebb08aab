-- Prepended to every script by app/store/connection.py. Every script touches one shard:
-- its keys share one hash tag (app/store/keys.py), so it is legal on Redis Cluster.
--
-- Time comes from the Redis server's clock for leases (one clock for every lease, whatever
-- host the worker or reaper runs on). Redis 6.2 allows a write after TIME only with effects
-- replication switched on; Redis 7 always replicates effects and keeps this as a no-op.
redis.replicate_commands()

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A job's turns and events are JSON arrays held as text in the job hash: appending is a
-- string operation on a value the script has read anyway, so it costs no command.
local function append(list, element)
  if not list or list == '' or list == '[]' then
    return '[' .. element .. ']'
  end
  return string.sub(list, 1, -2) .. ',' .. element .. ']'
end

local function event(name, data)
  return '{"name":"' .. name .. '","data":' .. data .. '}'
end

-- The fence: a worker may write only while the job is running under its claim (the
-- attempt number doubles as the fencing token: it grows with every claim of the job).
local function fenced(f, token)
  return f[1] == 'in_progress' and f[2] == token
end

-- Put a job back at the front of its tenant's queue, and the tenant at the front of the
-- ring when its queue was empty: the ring holds exactly the tenants with queued jobs, each
-- once (lua/claim.lua).
local function requeue_front(queue, ring, tenant, id)
  if redis.call('LPUSH', queue, id) == 1 then
    redis.call('LPUSH', ring, tenant)
  end
end

-- What the job's calls cost so far, over every attempt: the running total of turn spends.
-- The first spend is the total as it is (a whole app.core.turn.Spend, as the worker writes
-- it): no decoding nor encoding in the script for most jobs.
local function add_spend(total, delta)
  if not total or total == '' then
    return delta
  end
  local t = cjson.decode(total)
  local d = cjson.decode(delta)
  t.calls = t.calls + d.calls
  t.inputTokens = t.inputTokens + d.inputTokens
  t.outputTokens = t.outputTokens + d.outputTokens
  t.cost = t.cost + d.cost
  t.costKnown = t.costKnown and d.costKnown
  -- Absent from totals written before prompt caching was counted.
  t.cachedInputTokens = (t.cachedInputTokens or 0) + (d.cachedInputTokens or 0)
  t.cacheWriteTokens = (t.cacheWriteTokens or 0) + (d.cacheWriteTokens or 0)
  return cjson.encode(t)
end

local function terminal(status)
  return status == 'succeeded' or status == 'failed' or status == 'cancelled'
end

-- End a job: its final state, result and last event, the retention clock, the waiters told.
-- ``fields`` are extra hash fields to write in the same HSET; ``message`` what the done
-- channel hears (nil: the id).
local function finish(job, id, status, result, events, finished, retention, channel, fields,
    known, message)
  table.insert(fields, 'status')
  table.insert(fields, status)
  table.insert(fields, 'result')
  table.insert(fields, result)
  table.insert(fields, 'events')
  table.insert(fields, events)
  table.insert(fields, 'finished_ms')
  table.insert(fields, finished)
  redis.call('HSET', job, unpack(fields))
  redis.call('EXPIRE', job, retention)
  outbox_add(job, id, status, known)  -- #13: its callback, in this same script (lua/outbox.lua)
  redis.call('PUBLISH', channel, message or id)
end

-- A job leaves in_progress: if its claim counted it among its tenant's running jobs, it
-- no longer does (the caller clears the job's ``counted`` field in its own HSET when the
-- job goes back to the queue). ``running`` is the shard's count hash.
local function uncount(running, tenant, counted)
  if counted == '1' then
    redis.call('HINCRBY', running, tenant, -1)
  end
end

-- An idle-list entry: "<token>/<lease ms>/<cap>/<worker id> <ms registered>" (the lease,
-- the per-tenant cap and the id its claims use: a submit claims a job for it, lua/submit.lua).
-- Returns token, ms, and lease, cap, owner (nil for an entry without them: "<token> <ms>").
local function listed(entry)
  local sep = string.find(entry, ' ', 1, true)
  if not sep then
    return nil
  end
  local head, ms = string.sub(entry, 1, sep - 1), tonumber(string.sub(entry, sep + 1))
  local token, lease, cap, owner = string.match(head, '^([^/]+)/(%d+)/(%d+)/(.+)$')
  if not token then
    return head, ms
  end
  return token, ms, tonumber(lease), tonumber(cap), owner
end

-- A queued job starts under a claim: what the claim writes to the job (attempts + 1 is the
-- fencing token; job_start appended; started_ms kept from a first claim), and the attempt.
-- With a cap on a tenant's running jobs the tenant's count grows and the job says so
-- (``uncount``). Shared by the claim (lua/claim.lua) and the hand-off (lua/submit.lua).
local function claimed(attempts, events, started, owner, now, running, tenant, cap)
  local attempt = (tonumber(attempts) or 0) + 1
  local text = string.format('%d', attempt)  -- formatted once (the hash field, the event)
  local fields = {'status', 'in_progress', 'attempts', text, 'owner', owner,
    'started_ms', started or now,
    'events', append(events, event('job_start', '{"attempt":' .. text .. '}'))}
  if cap > 0 then
    redis.call('HINCRBY', running, tenant, 1)
    table.insert(fields, 'counted')
    table.insert(fields, '1')
  end
  return attempt, fields
end

-- What a worker gets for a claimed job (``Leases.claim``): 10 values, in this order.
local function claim_reply(id, attempt, spec, tenant, created, model, spent, checkpoint,
    outputs, trace)
  return {id, attempt, spec, tenant, created, model or '', spent or '', checkpoint or '',
    outputs or '', trace or ''}
end

-- Wake one idle worker on its own channel: true when one was told, and whether the list
-- was empty. A worker whose claim found this shard's queues empty with slots to spare is
-- on the idle list (``listed``; lua/claim.lua); the list turns (LMOVE), so
-- wake-ups go round the idle workers. A registration older than ``stale`` ms is a worker
-- that stopped claiming (dead, stuck): dropped. On one Redis (``exact``), PUBLISH counts
-- the subscribers it reached, so a worker that died (its subscription went with it) is
-- dropped too and the next one tried; on a cluster it counts only this node's, and a fresh
-- registration is trusted (a dead worker's lasts ``stale`` ms; the other idle workers'
-- once-a-second look finds the job it missed).
local function wake_listed(idle, channel, shard, now, stale, exact)
  for _ = 1, 3 do
    local entry = redis.call('LMOVE', idle, idle, 'LEFT', 'RIGHT')
    if not entry then
      return false, true
    end
    local token, ms = listed(entry)
    if ms and now - ms <= stale then
      local heard = redis.call('PUBLISH', channel .. ':' .. token, shard)
      if heard > 0 or not exact then
        return true, false
      end
    end
    redis.call('LREM', idle, 0, entry)  -- every copy (lua/claim.lua)
  end
  return false, false
end
