-- Create a job: idempotency, the tenant's caps, record, index, then hand it to an idle
-- worker or queue it and wake one: atomically. Sent: app/store/protocol.py's SubmitKeys,
-- SubmitArgs (``idempotency``: only with an Idempotency-Key).
-- Returns {'created', id} | {'created', id, 'no-handoff'} (the hand-off or the wake-up
--       found jobs queued or nobody listed: the API tries no hand-off for a while; the
--       entries the hand-offs took come back with the jobs' commits)
--       | {'created', id, '', 'handed'} (claimed for an idle worker, below)
--       | {'existing', id} | {'conflict', id} | {'full', depth} | {'quota', bytes}
local job, tenant_queue, ring, tenant_index, tenant_bytes, idle, leases, running,
  idempotency = unpack(KEYS)
local id, tenant, digest, spec, metadata, model, idempotency_key, queued_result, max_queued,
  idempotency_ttl_s, job_bytes, max_tenant_bytes, window_ttl_s, work_channel, shard,
  created_ms, job_prefix, queued_event, index_expires_ms, id_floor, callback, trace,
  index_mark, stale_ms, exact_publish, no_handoff, server_ms, handoff_head = unpack(ARGV)

-- Wake one idle worker on its own channel (``wake_listed``, lua/common.lua). Nobody to
-- wake (or ``skip``: known to be empty): every worker is told on the shared channel, as a
-- release or a reap does. Returns true when the list was found empty.
local function wake_one(idle, channel, shard, now, stale, exact, skip)
  if not skip then
    local woken, empty = wake_listed(idle, channel, shard, now, stale, exact)
    if woken then
      return false
    end
    redis.call('PUBLISH', channel, shard)
    return empty
  end
  redis.call('PUBLISH', channel, shard)
  return false
end

-- The direct hand-off (one Redis only: ``exact``). An idle worker on the list while this
-- shard has no queued job at all (the ring is empty) gets the job claimed for it here, as
-- its claim would (``claimed``, lua/common.lua: its lease length, cap and id come with its
-- entry), and the claimed job (``claim_reply``) in a message on its own channel: no claim,
-- no round trip before the job runs. The hand-off takes the entry (a worker is listed once
-- per slot it offers, up to a bound: lua/claim.lua), so a burst goes round the workers and
-- never onto one beyond what it offered, and a worker that hangs strands at most that
-- many; the job's commit lists the entry again (lua/complete.lua). A registration older
-- than ``stale`` ms, or one whose PUBLISH reaches nobody (the worker died: its subscription
-- went with it), is dropped, every copy of it, and the next tried; nothing is written
-- before a worker heard the job, so a job nobody took goes the queue's way below.
-- ``now`` is Redis-now as the API estimated it (``server_ms``, app/store/clock.py: never behind
-- TIME, ahead by its reading's round trip at most; the worker's first heartbeat puts the
-- lease on TIME), or nil: TIME is read.
-- Returns {owner, lease, cap, now} for the worker that took it, or nil and why not when
-- the API is to try no hand-off for a while: 'empty' (nobody listed), 'queued' (jobs wait
-- here, which go first). Under load a submit spends one command on it, then none for a
-- while, and the workers stay listed: wake-ups go to one of them, as without hand-offs.
local function hand_off(idle, ring, running, channel, shard, stale, tenant, head, spec, now)
  if redis.call('LLEN', ring) > 0 then
    return nil, 'queued'
  end
  local entry = redis.call('LPOP', idle)
  if not entry then
    return nil, 'empty'
  end
  now = now or now_ms()
  for _ = 1, 3 do
    local token, ms, lease, cap, owner = listed(entry)
    if ms and not lease then  -- a worker that takes no hand-off: woken instead, below
      redis.call('LPUSH', idle, entry)
      return nil, nil
    end
    if ms and now - ms <= stale then
      if cap > 0 and (tonumber(redis.call('HGET', running, tenant)) or 0) >= cap then
        redis.call('LPUSH', idle, entry)  -- the tenant is at its cap: the job waits
        return nil, nil
      end
      local message = 'h' .. shard .. '\n' .. entry .. '\n' .. head .. '\n' .. spec
      if redis.call('PUBLISH', channel .. ':' .. token, message) > 0 then
        return {owner, lease, cap, now}, false
      end
    end
    redis.call('LREM', idle, 0, entry)  -- its other copies (a dead or stale worker)
    entry = redis.call('LPOP', idle)
    if not entry then
      return nil, 'empty'
    end
  end
  redis.call('LPUSH', idle, entry)
  return nil, nil
end

if idempotency then
  local held = redis.call('GET', idempotency)
  if held then
    local sep = string.find(held, ' ', 1, true)
    local id, body = string.sub(held, 1, sep - 1), string.sub(held, sep + 1)
    -- A job that already expired frees its key: the request creates a new job below.
    if redis.call('EXISTS', job_prefix .. id) == 1 then
      if body == digest then
        return {'existing', id}
      end
      return {'conflict', id}
    end
  end
end

-- Numbers go to Redis as the strings they came in (a Lua number is formatted with %.14g
-- for each command: a cost per argument), and are parsed once.
local byte_cap = tonumber(max_tenant_bytes) > 0
if byte_cap then
  local used = redis.call('INCRBY', tenant_bytes, job_bytes)
  local bytes = tonumber(job_bytes)
  if used == bytes then
    redis.call('EXPIRE', tenant_bytes, window_ttl_s)
  end
  if used > tonumber(max_tenant_bytes) then
    redis.call('DECRBY', tenant_bytes, job_bytes)
    return {'quota', used - bytes}
  end
end

local handed, skip = nil, nil
if exact_publish == '1' and no_handoff ~= '1' then
  handed, skip = hand_off(idle, ring, running, work_channel, shard, tonumber(stale_ms),
    tenant, handoff_head, spec, tonumber(server_ms))
end
local depth = 0
if not handed then
  depth = redis.call('RPUSH', tenant_queue, id)
  if depth > tonumber(max_queued) then
    redis.call('RPOP', tenant_queue)
    if byte_cap then
      redis.call('DECRBY', tenant_bytes, job_bytes)
    end
    return {'full', depth - 1}
  end
  -- The ring holds exactly the tenants with queued jobs, each once (lua/claim.lua).
  if depth == 1 then
    redis.call('RPUSH', ring, tenant)
  end
end

local fields = {
  'id', id, 'tenant', tenant, 'created_ms', created_ms, 'spec', spec, 'metadata', metadata,
  'result', queued_result, 'bytes', job_bytes,
}
local queued = '[' .. queued_event .. ']'
if handed then  -- queued and claimed at once: both events, the claim's fields
  local _, claim = claimed(0, queued, nil, handed[1], handed[4], running, tenant, handed[3])
  for _, v in ipairs(claim) do
    table.insert(fields, v)
  end
else
  for _, v in ipairs({'status', 'queued', 'attempts', '0', 'events', queued}) do
    table.insert(fields, v)
  end
end
if model ~= '' then
  table.insert(fields, 'model')
  table.insert(fields, model)
end
if callback ~= '' then  -- #13: what the job's ends send (lua/outbox.lua)
  table.insert(fields, 'callback')
  table.insert(fields, callback)
end
if trace ~= '' then  -- handed to the worker with each claim (lua/claim.lua)
  table.insert(fields, 'trace')
  table.insert(fields, trace)
end
if idempotency then
  table.insert(fields, 'idem')
  table.insert(fields, idempotency_key)
  redis.call('SET', idempotency, id .. ' ' .. digest, 'EX', idempotency_ttl_s)
end
redis.call('HSET', job, unpack(fields))
-- The index lives as long as any job it holds can. Not an EXPIRE per submit: with the id
-- goes the mark of the current index window, and only the first submit of a window (the
-- mark is new) moves the expiry, to one that covers every job of the window, and drops the
-- older marks. Now and then the entries older than any job can live are dropped.
if redis.call('ZADD', tenant_index, '0', id, '0', index_mark) == 2 then
  redis.call('PEXPIREAT', tenant_index, index_expires_ms)
  redis.call('ZREMRANGEBYLEX', tenant_index, '-', '(' .. index_mark)
end
local created = tonumber(created_ms)
if created % 64 == 0 then
  redis.call('ZREMRANGEBYLEX', tenant_index, '(' .. index_mark, '(' .. id_floor)
end
if handed then
  redis.call('ZADD', leases, handed[4] + handed[2], id)
  return {'created', id, '', 'handed'}
end
-- Wake one worker when the queue was empty. A job queued behind others needs no wake-up:
-- the claim that takes the jobs before it was woken by the first one, and a worker whose
-- claim got all it asked for claims again as soon as it has a free slot. Why the hand-off
-- could not be, when it is likely to last a while, is told to the API (it tries none
-- then) whatever the depth: under load a submit spends no command on it.
if depth == 1 and wake_one(idle, work_channel, shard, created, tonumber(stale_ms),
    exact_publish == '1', skip == 'empty') then
  return {'created', id, 'no-handoff'}
end
if skip then
  return {'created', id, 'no-handoff'}
end
return {'created', id}
