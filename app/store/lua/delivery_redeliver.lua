-- Send a job's latest callback delivery again (#13, operators): whatever its state, it is
-- pending and due now, with a new retry window; attempts keep counting, the webhook-id
-- stays (the same message). A sender holding it records nothing (its lease is gone).
-- KEYS: 1 job  2 outbox
-- ARGV: 1 id  2 tenant  3 outbox channel
-- Returns {'missing'} | {'none', '1' if the job has a callback else '0'} | {'queued', event}
local events = {'succeeded', 'failed', 'cancelled', 'requires_action'}
local f = redis.call('HMGET', KEYS[1], 'tenant', 'cb:' .. events[1], 'cb:' .. events[2],
  'cb:' .. events[3], 'cb:' .. events[4], 'callback')
if not f[1] or f[1] ~= ARGV[2] then
  return {'missing'}
end
local latest, event = nil, nil
for i, name in ipairs(events) do
  if f[i + 1] then
    local d = cjson.decode(f[i + 1])
    if not latest or d.created > latest.created then
      latest, event = d, name
    end
  end
end
if not latest then
  return {'none', f[6] and '1' or '0'}
end
local now = now_ms()
latest.state = 'pending'
latest.lease = nil
latest.since = now
latest.due = now
latest.delivered = nil
latest.again = (latest.again or 0) + 1
redis.call('HSET', KEYS[1], 'cb:' .. event, cjson.encode(latest))
redis.call('ZADD', KEYS[2], now, ARGV[1] .. ' ' .. event)
redis.call('PUBLISH', ARGV[3], ARGV[1])
return {'queued', event}
