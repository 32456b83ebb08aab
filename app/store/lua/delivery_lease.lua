-- Lease this shard's due callback deliveries to one sender (#13), fairly between tenants
-- (#29): each is pushed back by the lease, so no other sender takes it while this one
-- sends, and a sender that is lost lets it come due again when the lease ends. A delivery
-- whose job expired, or that is settled, leaves the outbox.
-- Fairness: up to ``scan`` due deliveries are looked at, oldest first, and taken tenant by
-- tenant in turn; a tenant gets at most its share of the sender's ``slots``
-- (slots / the tenants due or in flight here, and never all of them while it is the only
-- one: half is kept for a tenant that comes next), counting what it already holds
-- (``inflight``, JSON tenant -> n). So a tenant whose receiver hangs cannot hold every
-- slot while another tenant's deliveries wait. What a tenant at its share leaves due is
-- pushed back ``hold_ms`` (no attempt counted): the oldest due deliveries would otherwise
-- stay one tenant's, and the next lease would not see the others' behind them.
-- Sent: app/store/protocol.py's OutboxKeys, DeliveryLeaseArgs.
-- Returns {flat list, 6 per delivery: id, event, tenant, callback json, attempts, pause;
--          ms until the next delivery is due (-1: none)}
local outbox = unpack(KEYS)
local job_prefix, wanted, lease_ms, token, slots, scan, inflight, hold_ms = unpack(ARGV)
wanted, slots = tonumber(wanted), tonumber(slots)
local holding = cjson.decode(inflight)
local now = now_ms()
local members = redis.call('ZRANGEBYSCORE', outbox, '-inf', now, 'LIMIT', 0, tonumber(scan))
local order, queues = {}, {}
for _, member in ipairs(members) do
  local sep = string.find(member, ' ', 1, true)
  local id, event = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
  local job = job_prefix .. id
  local f = redis.call('HMGET', job, 'tenant', 'callback', 'cb:' .. event)
  local d = f[3] and cjson.decode(f[3])
  if not d or d.state ~= 'pending' or not f[2] then
    redis.call('ZREM', outbox, member)
  else
    local tenant = f[1]
    if not queues[tenant] then
      queues[tenant] = {}
      table.insert(order, tenant)
    end
    table.insert(queues[tenant], {member, job, id, event, f[2], d})
  end
end
local tenants = #order
for tenant, n in pairs(holding) do
  if not queues[tenant] and tonumber(n) > 0 then
    tenants = tenants + 1
  end
end
local share = math.max(1, math.floor(slots / math.max(2, tenants)))
local out, taken, took = {}, 0, true
local held, next_of = {}, {}
for _, tenant in ipairs(order) do
  held[tenant] = tonumber(holding[tenant] or 0)
  next_of[tenant] = 1
end
while taken < wanted and took do
  took = false
  for _, tenant in ipairs(order) do
    local queue = queues[tenant]
    local item = queue[next_of[tenant]]
    if taken < wanted and item and held[tenant] < share then
      local member, job, id, event, callback, d = unpack(item)
      d.lease = token
      redis.call('HSET', job, 'cb:' .. event, cjson.encode(d))
      redis.call('ZADD', outbox, now + tonumber(lease_ms), member)
      for _, v in ipairs({id, event, tenant, callback, d.attempts, d.pause}) do
        table.insert(out, v)
      end
      next_of[tenant] = next_of[tenant] + 1
      held[tenant] = held[tenant] + 1
      taken = taken + 1
      took = true
    end
  end
end
-- Held back for fairness: due again after hold_ms, behind the other tenants' deliveries.
for _, tenant in ipairs(order) do
  local queue = queues[tenant]
  if held[tenant] >= share then
    for i = next_of[tenant], #queue do
      redis.call('ZADD', outbox, now + tonumber(hold_ms), queue[i][1])
    end
  end
end
local next_due = -1
local first = redis.call('ZRANGE', outbox, 0, 0, 'WITHSCORES')
if first[2] then
  next_due = math.max(0, tonumber(first[2]) - now)
end
return {out, next_due}
