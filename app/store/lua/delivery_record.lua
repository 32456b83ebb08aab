-- Record how one attempt of a leased callback delivery went (#13), fenced by the lease
-- token: a sender whose lease ended and was taken by another (or redelivered) records
-- nothing.
-- Sent: app/store/protocol.py's OutboxKeys, DeliveryRecordArgs. ``outcome``: delivered |
-- retry | failed | superseded | released (not sent: due after ``wait_ms``, no attempt
-- counted; a sender backing off a receiver host that keeps timing out defers so, #29).
-- Returns the delivery's state after (pending | delivered | failed | superseded), 'stale'
-- or 'gone' (the job expired)
local outbox = unpack(KEYS)
local job, member, callback_event, token, outcome, status, error_text, wait_ms,
  window_ms = unpack(ARGV)
local key = 'cb:' .. callback_event
local raw = redis.call('HGET', job, key)
if not raw then
  redis.call('ZREM', outbox, member)
  return 'gone'
end
local d = cjson.decode(raw)
if d.state ~= 'pending' or d.lease ~= token then
  return 'stale'
end
d.lease = nil
local now = now_ms()
if outcome == 'released' then
  d.due = now + tonumber(wait_ms)
elseif outcome == 'superseded' then
  d.state = 'superseded'
else
  d.attempts = d.attempts + 1
  d.last = now
  d.status = tonumber(status)
  d.error = nil
  if error_text ~= '' then
    d.error = error_text
  end
  if outcome == 'delivered' then
    d.state = 'delivered'
    d.delivered = now
  elseif outcome == 'retry' then
    -- Within the window: the wait (backoff or Retry-After), the last try at its end.
    local deadline = d.since + tonumber(window_ms)
    if now >= deadline then
      d.state = 'failed'
      d.error = (d.error or 'failed') .. '; no success within the retry window'
    else
      d.due = math.min(now + tonumber(wait_ms), deadline)
    end
  else
    d.state = 'failed'
  end
end
if d.state == 'pending' then
  redis.call('ZADD', outbox, d.due, member)
else
  d.due = nil
  redis.call('ZREM', outbox, member)
end
redis.call('HSET', job, key, cjson.encode(d))
return d.state
