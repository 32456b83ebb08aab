-- Extend a lease, fenced. KEYS: 1 job  2 leases.  ARGV: 1 id  2 token  3 lease ms
local f = redis.call('HMGET', KEYS[1], 'status', 'attempts')
if not fenced(f, ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[2], 'XX', now_ms() + tonumber(ARGV[3]), ARGV[1])
return 1
