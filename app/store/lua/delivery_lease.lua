-- Lease this shard's due callback deliveries to one sender (#13): each is pushed back by
-- the lease, so no other sender takes it while this one sends, and a sender that is lost
-- lets it come due again when the lease ends. A delivery whose job expired, or that is
-- settled, leaves the outbox.
-- Sent: app/store/protocol.py's OutboxKeys, DeliveryLeaseArgs.
-- Returns {flat list, 6 per delivery: id, event, tenant, callback json, attempts, pause;
--          ms until the next delivery is due (-1: none)}
local outbox = unpack(KEYS)
local job_prefix, wanted, lease_ms, token = unpack(ARGV)
local now = now_ms()
local members = redis.call('ZRANGEBYSCORE', outbox, '-inf', now, 'LIMIT', 0, tonumber(wanted))
local out = {}
for _, member in ipairs(members) do
  local sep = string.find(member, ' ', 1, true)
  local id, event = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
  local job = job_prefix .. id
  local f = redis.call('HMGET', job, 'tenant', 'callback', 'cb:' .. event)
  local d = f[3] and cjson.decode(f[3])
  if not d or d.state ~= 'pending' or not f[2] then
    redis.call('ZREM', outbox, member)
  else
    d.lease = token
    redis.call('HSET', job, 'cb:' .. event, cjson.encode(d))
    redis.call('ZADD', outbox, now + tonumber(lease_ms), member)
    for _, v in ipairs({id, event, f[1], f[2], d.attempts, d.pause}) do
      table.insert(out, v)
    end
  end
end
local next_due = -1
local first = redis.call('ZRANGE', outbox, 0, 0, 'WITHSCORES')
if first[2] then
  next_due = math.max(0, tonumber(first[2]) - now)
end
return {out, next_due}
