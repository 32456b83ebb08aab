-- Completion callbacks (#13): the outbox of a shard. Prepended to every script before
-- common.lua (whose finish calls outbox_add), so the script that changes a job's state
-- writes its delivery too: a crash between the change and the send loses nothing.
--
-- A job submitted with a callback holds it in its hash (``callback``: {"url", "events"}).
-- When it reaches one of those events, the delivery's state goes in the same hash as
-- ``cb:<event>``, JSON: {state, attempts, since, created, due, pause, lease, last, status,
-- error, delivered, again}; it lives and expires with the job. The shard's outbox zset holds
-- "<id> <event>" scored by when the delivery is due (server ms; while a sender holds it, by
-- when its lease ends). Both key and wake-up channel derive from the job key, which
-- app/store/keys.py builds as "<prefix>:{<tag>}:job:<id>": the outbox is
-- "<prefix>:{<tag>}:outbox" (ShardKeys.outbox), the channel "<prefix>:outbox".

local function outbox_key(job, id)
  return string.sub(job, 1, #job - #id - 4) .. 'outbox'
end

local function outbox_channel(job)
  return string.match(job, '^[^:]*') .. ':outbox'
end

-- The job ``id`` (hash ``job``) reached ``event``: a delivery, due now, if its callback
-- asks for that event. A later pause replaces the delivery of the one before (its
-- ``pause`` number names which one the webhook-id is for). ``known``: the job's
-- {callback, pauses} when the caller has already read them (nil: read here).
local function outbox_add(job, id, event, known)
  local f = known or redis.call('HMGET', job, 'callback', 'pauses')
  if not f[1] then
    return
  end
  -- The store writes it from a validated CallbackSpec; still, a job must always be able to
  -- end, so a callback that does not decode sends nothing rather than failing the script.
  local ok, callback = pcall(cjson.decode, f[1])
  local wanted = false
  if ok and type(callback) == 'table' and type(callback.events) == 'table' then
    for _, name in ipairs(callback.events) do
      wanted = wanted or name == event
    end
  end
  if not wanted then
    return
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local pause = 0
  if event == 'requires_action' then
    pause = tonumber(f[2]) or 0
  end
  local state = {state = 'pending', attempts = 0, since = now, created = now, due = now,
    pause = pause}
  redis.call('HSET', job, 'cb:' .. event, cjson.encode(state))
  redis.call('ZADD', outbox_key(job, id), now, id .. ' ' .. event)
  redis.call('PUBLISH', outbox_channel(job), id)
end
