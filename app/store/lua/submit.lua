-- Create a job: idempotency, the tenant's caps, record, index, then hand it to an idle
-- worker or queue it and wake one: atomically.
-- KEYS: 1 job  2 tenant queue  3 ring  4 tenant index  5 tenant bytes (this window)
--       6 idle workers (lua/claim.lua)  7 leases  8 running counts  [9 idempotency key]
-- ARGV: 1 id  2 tenant  3 body sha256 ('' without KEYS[9])  4 spec json  5 metadata json
--       6 model ('' = none)  7 idempotency key ('' = none)  8 queued result json
--       9 max queued (tenant, shard)  10 idempotency ttl s  11 job bytes
--       12 max bytes (tenant, shard, window; 0 = none)
--       13 window ttl s  14 work channel  15 shard  16 created ms  17 job key prefix
--       18 queued event json  19 when the tenant index expires (ms; covers a job created
--       in this index window)  20 the smallest id a job can have that is still stored
--       21 callback json ('' = none; lua/outbox.lua)  22 the client's trace context json
--       ('' = none; app/tracecontext.py)  23 this index window's mark (a member below every
--       id: app/store/jobs.py)  24 how old (ms) an idle worker's registration may be
--       25 '1' when PUBLISH counts every subscriber (one Redis), '' when it counts only this
--       node's (a cluster)  26 '1': no hand-off (this API process found it impossible a
--       moment ago, or another submit of it to this shard is in flight: a burst), wake one
--       as before  27 Redis-now as the API estimates it (ms; app/store/clock.py), the
--       hand-off's lease start ('' = none: read TIME)  28 the claimed job's values but the
--       spec, as the hand-off's message carries them: the JSON array of ``claim_reply``
--       (lua/common.lua) without its third value, attempt 1 ('' when ARGV[26] is '1')
-- Returns {'created', id} | {'created', id, 'no-handoff'} (the hand-off or the wake-up
--       found jobs queued or nobody listed: the API tries no hand-off for a while; the
--       entries the hand-offs took come back with the jobs' commits)
--       | {'created', id, '', 'handed'} (claimed for an idle worker, below)
--       | {'existing', id} | {'conflict', id} | {'full', depth} | {'quota', bytes}

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
-- ``now`` is Redis-now as the API estimated it (ARGV[27], app/store/clock.py: never behind
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

local idem = KEYS[9]
if idem then
  local held = redis.call('GET', idem)
  if held then
    local sep = string.find(held, ' ', 1, true)
    local id, body = string.sub(held, 1, sep - 1), string.sub(held, sep + 1)
    -- A job that already expired frees its key: the request creates a new job below.
    if redis.call('EXISTS', ARGV[17] .. id) == 1 then
      if body == ARGV[3] then
        return {'existing', id}
      end
      return {'conflict', id}
    end
  end
end

-- Numbers go to Redis as the strings they came in (a Lua number is formatted with %.14g
-- for each command: a cost per argument), and are parsed once.
local size = ARGV[11]
local byte_cap = tonumber(ARGV[12]) > 0
if byte_cap then
  local used = redis.call('INCRBY', KEYS[5], size)
  local bytes = tonumber(size)
  if used == bytes then
    redis.call('EXPIRE', KEYS[5], ARGV[13])
  end
  if used > tonumber(ARGV[12]) then
    redis.call('DECRBY', KEYS[5], size)
    return {'quota', used - bytes}
  end
end

local id, tenant = ARGV[1], ARGV[2]
local created = ARGV[16]
local handed, skip = nil, nil
if ARGV[25] == '1' and ARGV[26] ~= '1' then
  handed, skip = hand_off(KEYS[6], KEYS[3], KEYS[8], ARGV[14], ARGV[15], tonumber(ARGV[24]),
    tenant, ARGV[28], ARGV[4], tonumber(ARGV[27]))
end
local depth = 0
if not handed then
  depth = redis.call('RPUSH', KEYS[2], id)
  if depth > tonumber(ARGV[9]) then
    redis.call('RPOP', KEYS[2])
    if byte_cap then
      redis.call('DECRBY', KEYS[5], size)
    end
    return {'full', depth - 1}
  end
  -- The ring holds exactly the tenants with queued jobs, each once (lua/claim.lua).
  if depth == 1 then
    redis.call('RPUSH', KEYS[3], tenant)
  end
end

local fields = {
  'id', id, 'tenant', tenant, 'created_ms', created, 'spec', ARGV[4], 'metadata', ARGV[5],
  'result', ARGV[8], 'bytes', size,
}
local queued = '[' .. ARGV[18] .. ']'
if handed then  -- queued and claimed at once: both events, the claim's fields
  local _, claim = claimed(0, queued, nil, handed[1], handed[4], KEYS[8], tenant, handed[3])
  for _, v in ipairs(claim) do
    table.insert(fields, v)
  end
else
  for _, v in ipairs({'status', 'queued', 'attempts', '0', 'events', queued}) do
    table.insert(fields, v)
  end
end
if ARGV[6] ~= '' then
  table.insert(fields, 'model')
  table.insert(fields, ARGV[6])
end
if ARGV[21] ~= '' then  -- #13: what the job's ends send (lua/outbox.lua)
  table.insert(fields, 'callback')
  table.insert(fields, ARGV[21])
end
if ARGV[22] ~= '' then  -- handed to the worker with each claim (lua/claim.lua)
  table.insert(fields, 'trace')
  table.insert(fields, ARGV[22])
end
if idem then
  table.insert(fields, 'idem')
  table.insert(fields, ARGV[7])
  redis.call('SET', idem, id .. ' ' .. ARGV[3], 'EX', ARGV[10])
end
redis.call('HSET', KEYS[1], unpack(fields))
-- The index lives as long as any job it holds can. Not an EXPIRE per submit: with the id
-- goes the mark of the current index window, and only the first submit of a window (the
-- mark is new) moves the expiry, to one that covers every job of the window, and drops the
-- older marks. Now and then the entries older than any job can live are dropped.
if redis.call('ZADD', KEYS[4], '0', id, '0', ARGV[23]) == 2 then
  redis.call('PEXPIREAT', KEYS[4], ARGV[19])
  redis.call('ZREMRANGEBYLEX', KEYS[4], '-', '(' .. ARGV[23])
end
local created_ms = tonumber(created)
if created_ms % 64 == 0 then
  redis.call('ZREMRANGEBYLEX', KEYS[4], '(' .. ARGV[23], '(' .. ARGV[20])
end
if handed then
  redis.call('ZADD', KEYS[7], handed[4] + handed[2], id)
  return {'created', id, '', 'handed'}
end
-- Wake one worker when the queue was empty. A job queued behind others needs no wake-up:
-- the claim that takes the jobs before it was woken by the first one, and a worker whose
-- claim got all it asked for claims again as soon as it has a free slot. Why the hand-off
-- could not be, when it is likely to last a while, is told to the API (it tries none
-- then) whatever the depth: under load a submit spends no command on it.
if depth == 1 and wake_one(KEYS[6], ARGV[14], ARGV[15], created_ms, tonumber(ARGV[24]),
    ARGV[25] == '1', skip == 'empty') then
  return {'created', id, 'no-handoff'}
end
if skip then
  return {'created', id, 'no-handoff'}
end
return {'created', id}
