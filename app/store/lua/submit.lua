-- Create a job: idempotency check, queue cap, record, index, queue, event, wake — atomically.
-- KEYS: 1 job  2 queue  3 wake  4 tenant index  5 events  [6 idempotency key]
-- ARGV: 1 id  2 tenant  3 body sha256  4 spec json  5 metadata json  6 model ('' = none)
--       7 idempotency key ('' = none)  8 in-progress result json  9 max queued
--       10 idempotency ttl s  11 events maxlen  12 wake cap  13 job key prefix
-- Returns {'created', id, created_ms, event id} | {'existing', id} | {'conflict', id} | {'full', depth}
local idem = KEYS[6]
if idem then
  local held = redis.call('GET', idem)
  if held then
    local sep = string.find(held, ' ', 1, true)
    local id, body = string.sub(held, 1, sep - 1), string.sub(held, sep + 1)
    -- A job that already expired frees its key: the request creates a new job below.
    if redis.call('EXISTS', ARGV[13] .. id) == 1 then
      if body == ARGV[3] then
        return {'existing', id}
      end
      return {'conflict', id}
    end
  end
end

local depth = redis.call('LLEN', KEYS[2])
if depth >= tonumber(ARGV[9]) then
  return {'full', depth}
end

local id = ARGV[1]
local now = now_ms()
redis.call('HSET', KEYS[1],
  'id', id, 'tenant', ARGV[2], 'status', 'queued', 'created_ms', now, 'attempts', 0,
  'spec', ARGV[4], 'metadata', ARGV[5], 'result', ARGV[8], 'history', '[]', 'transcript', '[]')
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], 'model', ARGV[6])
end
if idem then
  redis.call('HSET', KEYS[1], 'idem', ARGV[7])
  redis.call('SET', idem, id .. ' ' .. ARGV[3], 'EX', ARGV[10])
end
redis.call('ZADD', KEYS[4], 0, id)
redis.call('RPUSH', KEYS[2], id)
local event_id = add_event(KEYS[5], ARGV[11], 'job_queued', '{"status":"queued"}')
wake(KEYS[3], ARGV[12])
return {'created', id, now, event_id}
