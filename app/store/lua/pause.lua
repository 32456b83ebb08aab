-- A running job stops for its client's tool outputs (requires_action), fenced. The worker
-- lets go of it: no lease, not counted as running, the attempt given back (a pause is not
-- a lost worker). The checkpoint holds the loop's state and every turn so far, so the
-- running spend total starts again from zero (the checkpoint carries it).
-- Sent: app/store/protocol.py's PauseKeys, PauseArgs (``actions``: id → expiry ms).
-- Returns 1 (paused), 0 (not ours: only the turn record, if any, was kept), -1 (ended)
local job, leases, running, actions = unpack(KEYS)
local id, token, checkpoint, action, result, turn, turn_spend, events, expires_ms,
  done_channel, events_channel = unpack(ARGV)
local f = redis.call('HMGET', job, 'status', 'attempts', 'turns', 'events', 'spent',
  'tenant', 'counted', 'pauses')
if not f[1] or terminal(f[1]) then
  return -1
end
local turns = f[3]
if turn ~= '' then
  turns = append(turns, turn)
end
if not fenced(f, token) then
  if turn ~= '' then
    redis.call('HSET', job, 'turns', turns, 'spent', add_spend(f[5], turn_spend))
  end
  return 0
end
local fields = {'status', 'requires_action', 'attempts', tonumber(f[2]) - 1,
  'checkpoint', checkpoint, 'action', action, 'result', result,
  'events', append(f[4], events), 'counted', '0', 'pauses', (tonumber(f[8]) or 0) + 1}
if turns then
  table.insert(fields, 'turns')
  table.insert(fields, turns)
end
redis.call('HSET', job, unpack(fields))
redis.call('HDEL', job, 'owner', 'spent', 'outputs')
redis.call('ZREM', leases, id)
uncount(running, f[6], f[7])
redis.call('ZADD', actions, tonumber(expires_ms), id)
outbox_add(job, id, 'requires_action')  -- #13: its callback (lua/outbox.lua)
redis.call('PUBLISH', done_channel, id)
redis.call('PUBLISH', events_channel, id)
return 1
