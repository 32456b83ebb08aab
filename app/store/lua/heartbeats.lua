-- Extend the leases of many jobs of one shard at once, each fenced by its own token: a
-- worker renews everything it holds in one round trip per heartbeat, not one per job.
-- Sent: app/store/protocol.py's HeartbeatsKeys, HeartbeatsArgs, then job id, token pairs.
-- Returns the ids whose lease is lost (not in_progress under that token any more): their
-- leases are left as they are, whoever holds them now.
local leases = unpack(KEYS)
local job_prefix, lease_ms = unpack(ARGV, 1, 2)
local lease_end = now_ms() + tonumber(lease_ms)
local lost, renewed = {}, {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  if fenced(redis.call('HMGET', job_prefix .. id, 'status', 'attempts'), ARGV[i + 1]) then
    table.insert(renewed, lease_end)
    table.insert(renewed, id)
  else
    table.insert(lost, id)
  end
end
-- ZADD in slices: unpack() of a long table overflows Lua's C stack (about 8000 values).
local step = 1000
for i = 1, #renewed, step do
  redis.call('ZADD', leases, 'XX', unpack(renewed, i, math.min(i + step - 1, #renewed)))
end
return lost
