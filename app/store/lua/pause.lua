-- A running job stops for its client's tool outputs (requires_action), fenced. The worker
-- lets go of it: no lease, not counted as running, the attempt given back (a pause is not
-- a lost worker). The checkpoint holds the loop's state and every turn so far, so the
-- running spend total starts again from zero (the checkpoint carries it).
-- KEYS: 1 job  2 leases  3 running counts  4 actions (zset: id → expiry ms)
-- ARGV: 1 id  2 token  3 checkpoint json  4 required action json  5 result json
--       6 last turn record json ('' = none)  7 its spend json ('' = none)
--       8 events to append (json, comma-separated, ending with requires_action)
--       9 expires ms  10 done channel  11 events channel
-- Returns 1 (paused), 0 (not ours: only the turn record, if any, was kept), -1 (ended)
local f = redis.call('HMGET', KEYS[1], 'status', 'attempts', 'turns', 'events', 'spent',
  'tenant', 'counted', 'pauses')
if not f[1] or terminal(f[1]) then
  return -1
end
local turns = f[3]
if ARGV[6] ~= '' then
  turns = append(turns, ARGV[6])
end
if not fenced(f, ARGV[2]) then
  if ARGV[6] ~= '' then
    redis.call('HSET', KEYS[1], 'turns', turns, 'spent', add_spend(f[5], ARGV[7]))
  end
  return 0
end
local fields = {'status', 'requires_action', 'attempts', tonumber(f[2]) - 1,
  'checkpoint', ARGV[3], 'action', ARGV[4], 'result', ARGV[5],
  'events', append(f[4], ARGV[8]), 'counted', '0', 'pauses', (tonumber(f[8]) or 0) + 1}
if turns then
  table.insert(fields, 'turns')
  table.insert(fields, turns)
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('HDEL', KEYS[1], 'owner', 'spent', 'outputs')
redis.call('ZREM', KEYS[2], ARGV[1])
uncount(KEYS[3], f[6], f[7])
redis.call('ZADD', KEYS[4], tonumber(ARGV[9]), ARGV[1])
outbox_add(KEYS[1], ARGV[1], 'requires_action')  -- #13: its callback (lua/outbox.lua)
redis.call('PUBLISH', ARGV[10], ARGV[1])
redis.call('PUBLISH', ARGV[11], ARGV[1])
return 1
