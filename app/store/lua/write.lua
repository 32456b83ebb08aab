-- A worker's write during a run: a turn record, events, the in-progress result.
-- Sent: app/store/protocol.py's WriteKeys, WriteArgs.
-- A turn record is a paid call: it is kept even when the writer lost its claim (a zombie's
-- call was still paid for), as long as the job has not ended. Everything else is fenced.
-- Returns 1 (written), 0 (not ours: only the turn record, if any, was kept), -1 (ended).
local job = unpack(KEYS)
local token, turn, turn_spend, events, result, events_channel, id = unpack(ARGV)
local f = redis.call('HMGET', job, 'status', 'attempts', 'turns', 'events', 'spent')
if not f[1] or f[1] == 'succeeded' or f[1] == 'failed' or f[1] == 'cancelled' then
  return -1
end
local fields = {}
if turn ~= '' then
  table.insert(fields, 'turns')
  table.insert(fields, append(f[3], turn))
  table.insert(fields, 'spent')
  table.insert(fields, add_spend(f[5], turn_spend))
end
local mine = fenced(f, token)
if mine then
  if events ~= '' then
    table.insert(fields, 'events')
    table.insert(fields, string.sub(append(f[4], events), 1))
  end
  table.insert(fields, 'result')
  table.insert(fields, result)
end
if #fields > 0 then
  redis.call('HSET', job, unpack(fields))
end
if mine and events ~= '' then
  redis.call('PUBLISH', events_channel, id)
end
if mine then
  return 1
end
return 0
