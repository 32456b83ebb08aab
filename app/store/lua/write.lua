-- A worker's write during a run: a turn record, events, the in-progress result.
-- KEYS: 1 job
-- ARGV: 1 token  2 turn record json ('' = none)  3 turn spend json ('' = none)
--       4 events json array text without brackets ('' = none)  5 in-progress result json
--       6 events channel  7 id
-- A turn record is a paid call: it is kept even when the writer lost its claim (a zombie's
-- call was still paid for), as long as the job has not ended. Everything else is fenced.
-- Returns 1 (written), 0 (not ours: only the turn record, if any, was kept), -1 (ended).
local f = redis.call('HMGET', KEYS[1], 'status', 'attempts', 'turns', 'events', 'spent')
if not f[1] or f[1] == 'succeeded' or f[1] == 'failed' or f[1] == 'cancelled' then
  return -1
end
local fields = {}
if ARGV[2] ~= '' then
  table.insert(fields, 'turns')
  table.insert(fields, append(f[3], ARGV[2]))
  table.insert(fields, 'spent')
  table.insert(fields, add_spend(f[5], ARGV[3]))
end
local mine = fenced(f, ARGV[1])
if mine then
  if ARGV[4] ~= '' then
    table.insert(fields, 'events')
    table.insert(fields, string.sub(append(f[4], ARGV[4]), 1))
  end
  table.insert(fields, 'result')
  table.insert(fields, ARGV[5])
end
if #fields > 0 then
  redis.call('HSET', KEYS[1], unpack(fields))
end
if mine and ARGV[4] ~= '' then
  redis.call('PUBLISH', ARGV[6], ARGV[7])
end
if mine then
  return 1
end
return 0
