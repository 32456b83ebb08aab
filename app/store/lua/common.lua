-- Prepended to every script by app/store.py.
--
-- Time comes from the Redis server's clock (one clock for every lease, whatever host the
-- worker or reaper runs on). Redis 6.2 allows a write after TIME only with effects
-- replication switched on; Redis 7 always replicates effects and keeps this as a no-op.
redis.replicate_commands()

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The fence: a worker may write only while the job is running under its token.
local function fenced(job, token)
  local f = redis.call('HMGET', job, 'status', 'token')
  return f[1] == 'in_progress' and f[2] == token
end

local function add_event(stream, maxlen, name, data)
  return redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'name', name, 'data', data)
end

-- One token per runnable job, capped so an idle cluster does not grow the list forever.
local function wake(list, cap)
  redis.call('RPUSH', list, '1')
  redis.call('LTRIM', list, -tonumber(cap), -1)
end

local function expire_job(job, turns, events, seconds)
  redis.call('EXPIRE', job, seconds)
  redis.call('EXPIRE', turns, seconds)
  redis.call('EXPIRE', events, seconds)
end
