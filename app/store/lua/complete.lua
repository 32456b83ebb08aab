-- Commit a job's end, fenced: a worker that lost its claim commits nothing (but the paid
-- call of its last turn is still recorded while the job has not ended).
-- KEYS: 1 job  2 leases  3 running counts  [4 idle workers]
-- ARGV: 1 id  2 token  3 status  4 result json  5 history json  6 transcript json
--       7 last turn record json ('' = none)  8 its spend json ('' = none)
--       9 events to append before job_end (json, comma-separated; '' = none)  10 retention s
--       11 done channel  12 finished ms  13 the most bytes of a view the done message
--       carries (0: only the id)  [14 a copy of the worker's idle-list entry, with KEYS[4]]
-- Returns 1 (committed), 0 (not ours), -1 (the job had already ended)
--
-- A worker is listed once per free slot (lua/claim.lua), and each hand-off takes a copy
-- of its entry (lua/submit.lua). The slot this job held frees now: a worker with fewer
-- copies listed than free slots lists one more in this script (KEYS[4], ARGV[14]), before
-- the done message goes out, so the caller's next job finds it.
if KEYS[4] then
  redis.call('RPUSH', KEYS[4], ARGV[14])
end
local f = redis.call('HMGET', KEYS[1], 'status', 'attempts', 'turns', 'events', 'spent',
  'tenant', 'counted', 'pauses', 'callback', 'created_ms', 'started_ms', 'metadata', 'model',
  'idem', 'action')
if not f[1] or terminal(f[1]) then
  return -1
end
local turns, spent = f[3], f[5]
if ARGV[7] ~= '' then
  turns = append(turns, ARGV[7])
  spent = add_spend(spent, ARGV[8])
end
if not fenced(f, ARGV[2]) then
  if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[1], 'turns', turns, 'spent', spent)
  end
  return 0
end
local fields = {'history', ARGV[5], 'transcript', ARGV[6]}
if turns then
  table.insert(fields, 'turns')
  table.insert(fields, turns)
end
if spent then
  table.insert(fields, 'spent')
  table.insert(fields, spent)
end
redis.call('ZREM', KEYS[2], ARGV[1])
uncount(KEYS[3], f[6], f[7])
if f[8] then
  redis.call('HDEL', KEYS[1], 'checkpoint', 'outputs')  -- a paused job's state, done with
end
table.insert(fields, 'counted')
table.insert(fields, '0')
-- job_end's data is app.core.events.JobEnded: the status and the result stored with it.
local appended = event('job_end', '{"status":"' .. ARGV[3] .. '","result":' .. ARGV[4] .. '}')
if ARGV[9] ~= '' then
  appended = ARGV[9] .. ',' .. appended
end
-- The done message carries the job as a read right after this script would find it (the
-- fields of app.store.connection.VIEW_FIELDS), so a long-poll answers without reading it
-- again: not for a job with a callback (its deliveries change the view) nor a large one
-- (every API process hears every message). It is the id, then each field's name and value
-- a line each (no JSON encoding here: the values are stored text, JSON or not, passed on as
-- they are; app.store.jobs reads it), a field the job does not have left out, as a read
-- leaves it out. A value with a line break in it (not written by this version) sends only
-- the id: the API reads the job.
local message = ARGV[1]
local size = #ARGV[4] + #ARGV[5] + #ARGV[6] + #(turns or '') + #(f[12] or '')
if not f[9] and size <= tonumber(ARGV[13]) then
  -- HMGET's false is a missing field.
  local view = {'id', ARGV[1], 'tenant', f[6], 'status', ARGV[3], 'created_ms', f[10],
    'finished_ms', ARGV[12], 'attempts', f[2], 'result', ARGV[4], 'history', ARGV[5],
    'transcript', ARGV[6], 'started_ms', f[11], 'turns', turns or false, 'metadata', f[12],
    'model', f[13], 'idem', f[14], 'action', f[15], 'pauses', f[8]}
  local lines, plain = {}, true
  for i = 2, #view, 2 do
    local value = view[i]
    if value then
      if string.find(value, '\n', 1, true) then
        plain = false
        break
      end
      lines[#lines + 1] = view[i - 1]
      lines[#lines + 1] = value
    end
  end
  if plain then
    message = ARGV[1] .. '\n' .. table.concat(lines, '\n')
  end
end
finish(KEYS[1], ARGV[1], ARGV[3], ARGV[4], append(f[4], appended), ARGV[12], ARGV[10],
  ARGV[11], fields, {f[9], f[8]}, message)
return 1
