-- Record how one attempt of a leased callback delivery went (#13), fenced by the lease
-- token: a sender whose lease ended and was taken by another (or redelivered) records
-- nothing.
-- KEYS: 1 outbox
-- ARGV: 1 job key  2 member ("<id> <event>")  3 event  4 lease token
--       5 outcome: delivered | retry | failed | superseded | released (not sent: due now,
--       no attempt counted)  6 HTTP status ('' = none)  7 error text ('' = none)
--       8 wait ms before the next attempt (retry)  9 retry window ms
-- Returns the delivery's state after (pending | delivered | failed | superseded), 'stale'
-- or 'gone' (the job expired)
local key = 'cb:' .. ARGV[3]
local raw = redis.call('HGET', ARGV[1], key)
if not raw then
  redis.call('ZREM', KEYS[1], ARGV[2])
  return 'gone'
end
local d = cjson.decode(raw)
if d.state ~= 'pending' or d.lease ~= ARGV[4] then
  return 'stale'
end
d.lease = nil
local now = now_ms()
local outcome = ARGV[5]
if outcome == 'released' then
  d.due = now
elseif outcome == 'superseded' then
  d.state = 'superseded'
else
  d.attempts = d.attempts + 1
  d.last = now
  d.status = tonumber(ARGV[6])
  d.error = nil
  if ARGV[7] ~= '' then
    d.error = ARGV[7]
  end
  if outcome == 'delivered' then
    d.state = 'delivered'
    d.delivered = now
  elseif outcome == 'retry' then
    -- Within the window: the wait (backoff or Retry-After), the last try at its end.
    local deadline = d.since + tonumber(ARGV[9])
    if now >= deadline then
      d.state = 'failed'
      d.error = (d.error or 'failed') .. '; no success within the retry window'
    else
      d.due = math.min(now + tonumber(ARGV[8]), deadline)
    end
  else
    d.state = 'failed'
  end
end
if d.state == 'pending' then
  redis.call('ZADD', KEYS[1], d.due, ARGV[2])
else
  d.due = nil
  redis.call('ZREM', KEYS[1], ARGV[2])
end
redis.call('HSET', ARGV[1], key, cjson.encode(d))
return d.state
