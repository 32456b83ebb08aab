-- A tenant's open waits (long-polls, event streams), shared by every API replica
-- (app/store/quotas.py). Sent: app/store/protocol.py's HoldKeys, HoldArgs.
--
-- One sorted set a tenant: a wait's id → the end of its lease (ms). A wait that outlives its
-- lease renews it; those of a process that died are dropped once their leases have ended
-- (looked for only when the tenant is at its cap), so the set holds at most ``most`` live
-- members. The set expires ``keep_ms`` (the longest lease there is) after its last change.
-- ``now``: Redis's clock as the API estimates it (app/store/clock.py), '' = read TIME.
-- Replies 0 (held) or how many the tenant holds (refused). ``renew`` = '1': extend ``id``'s
-- lease if it is still held (replies 0, or 1 when it was not).
local waits = unpack(KEYS)
local id, most, lease_ms, keep_ms, renew, now = unpack(ARGV)
local at = tonumber(now) or now_ms()
if renew == '1' then
  if not redis.call('ZSCORE', waits, id) then
    return 1
  end
else
  local held = redis.call('ZCARD', waits)
  if held >= tonumber(most) then
    redis.call('ZREMRANGEBYSCORE', waits, '-inf', at)
    held = redis.call('ZCARD', waits)
    if held >= tonumber(most) then
      return held
    end
  end
end
redis.call('ZADD', waits, at + tonumber(lease_ms), id)
redis.call('PEXPIRE', waits, keep_ms)
return 0
