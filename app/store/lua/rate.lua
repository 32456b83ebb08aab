-- A tenant's request rate, shared by every API replica (app/store/quotas.py). Sent:
-- app/store/protocol.py's RateKeys, RateArgs.
--
-- A token bucket kept as one number (GCRA): the time at which the bucket would be full
-- again. One key a tenant, gone once the bucket would be full anyway; a cost larger than the
-- bucket is admitted when the bucket is full (and pays it all: the next requests wait).
-- ``now``: Redis's clock as the API estimates it (app/store/clock.py), '' = read TIME.
-- Replies 0 (admitted) or the milliseconds until the request would be.
local bucket = unpack(KEYS)
local interval_ms, burst, cost, now = unpack(ARGV)
local every, size, price = tonumber(interval_ms), tonumber(burst), tonumber(cost)
local at = tonumber(now) or now_ms()
local full_at = tonumber(redis.call('GET', bucket)) or at
if full_at < at then
  full_at = at
end
local early = full_at + (math.min(price, size) - size) * every - at
if early > 0 then
  return math.ceil(early)
end
full_at = full_at + price * every
redis.call('SET', bucket, string.format('%.3f', full_at), 'PX', math.max(1, math.ceil(full_at - at)))
return 0
