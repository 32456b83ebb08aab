-- This shard's queue: jobs waiting and the age (ms) of the oldest one at a queue's front.
-- KEYS: 1 ring.  ARGV: 1 tenant queue prefix  2 job key prefix  3 most tenants to look at
-- Returns {depth, oldest age ms, tenants with queued jobs}
local tenants = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
local depth, oldest = 0, nil
local now = now_ms()
for _, tenant in ipairs(tenants) do
  local queue = ARGV[1] .. tenant
  depth = depth + redis.call('LLEN', queue)
  local head = redis.call('LINDEX', queue, 0)
  if head then
    local created = tonumber(redis.call('HGET', ARGV[2] .. head, 'created_ms'))
    if created and (not oldest or created < oldest) then
      oldest = created
    end
  end
end
local age = 0
if oldest then
  age = math.max(0, now - oldest)
end
return {depth, age, #tenants}
