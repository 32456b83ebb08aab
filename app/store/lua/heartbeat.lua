-- Extend a lease, fenced. Sent: app/store/protocol.py's HeartbeatKeys, HeartbeatArgs.
local job, leases = unpack(KEYS)
local id, token, lease_ms = unpack(ARGV)
local f = redis.call('HMGET', job, 'status', 'attempts')
if not fenced(f, token) then
  return 0
end
redis.call('ZADD', leases, 'XX', now_ms() + tonumber(lease_ms), id)
return 1
