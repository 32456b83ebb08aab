-- This shard's queue: jobs waiting and the age (ms) of the oldest one at a queue's front.
-- Sent: app/store/protocol.py's StatsKeys, StatsArgs.
-- Returns {depth, oldest age ms, tenants with queued jobs}
local ring = unpack(KEYS)
local queue_prefix, job_prefix, max_tenants = unpack(ARGV)
local tenants = redis.call('LRANGE', ring, 0, tonumber(max_tenants) - 1)
local depth, oldest = 0, nil
local now = now_ms()
for _, tenant in ipairs(tenants) do
  local queue = queue_prefix .. tenant
  depth = depth + redis.call('LLEN', queue)
  local head = redis.call('LINDEX', queue, 0)
  if head then
    local created = tonumber(redis.call('HGET', job_prefix .. head, 'created_ms'))
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
