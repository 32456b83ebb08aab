-- Send a job's latest callback delivery again (#13, operators): whatever its state, it is
-- pending and due now, with a new retry window; attempts keep counting, the webhook-id
-- stays (the same message). A sender holding it records nothing (its lease is gone).
-- Sent: app/store/protocol.py's RedeliverKeys, RedeliverArgs.
-- Returns {'missing'} | {'none', '1' if the job has a callback else '0'} | {'queued', event}
local job, outbox = unpack(KEYS)
local id, tenant, notify_channel = unpack(ARGV)
local events = {'succeeded', 'failed', 'cancelled', 'requires_action'}
local f = redis.call('HMGET', job, 'tenant', 'cb:' .. events[1], 'cb:' .. events[2],
  'cb:' .. events[3], 'cb:' .. events[4], 'callback')
if not f[1] or f[1] ~= tenant then
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
redis.call('HSET', job, 'cb:' .. event, cjson.encode(latest))
redis.call('ZADD', outbox, now, id .. ' ' .. event)
redis.call('PUBLISH', notify_channel, id)
return {'queued', event}
