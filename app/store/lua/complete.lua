-- Commit a job's end, fenced: a worker that lost its claim commits nothing (but the paid
-- call of its last turn is still recorded while the job has not ended).
-- Sent: app/store/protocol.py's CompleteKeys, CompleteArgs (``idle`` and ``relist_entry``
-- together, or neither).
-- Returns 1 (committed), 0 (not ours), -1 (the job had already ended)
--
-- A worker is listed once per free slot (lua/claim.lua), and each hand-off takes a copy
-- of its entry (lua/submit.lua). The slot this job held frees now: a worker with fewer
-- copies listed than free slots lists one more in this script (``relist_entry``), before
-- the done message goes out, so the caller's next job finds it.
local job, leases, running, idle = unpack(KEYS)
local id, token, status, result, history, transcript, turn, turn_spend, events, retention_s,
  done_channel, finished_ms, view_max_bytes, relist_entry = unpack(ARGV)
if idle then
  redis.call('RPUSH', idle, relist_entry)
end
local f = redis.call('HMGET', job, 'status', 'attempts', 'turns', 'events', 'spent',
  'tenant', 'counted', 'pauses', 'callback', 'created_ms', 'started_ms', 'metadata', 'model',
  'idem', 'action')
if not f[1] or terminal(f[1]) then
  return -1
end
local turns, spent = f[3], f[5]
if turn ~= '' then
  turns = append(turns, turn)
  spent = add_spend(spent, turn_spend)
end
if not fenced(f, token) then
  if turn ~= '' then
    redis.call('HSET', job, 'turns', turns, 'spent', spent)
  end
  return 0
end
local fields = {'history', history, 'transcript', transcript}
if turns then
  table.insert(fields, 'turns')
  table.insert(fields, turns)
end
if spent then
  table.insert(fields, 'spent')
  table.insert(fields, spent)
end
redis.call('ZREM', leases, id)
uncount(running, f[6], f[7])
if f[8] then
  redis.call('HDEL', job, 'checkpoint', 'outputs')  -- a paused job's state, done with
end
table.insert(fields, 'counted')
table.insert(fields, '0')
-- job_end's data is app.core.events.JobEnded: the status and the result stored with it.
local appended = event('job_end', '{"status":"' .. status .. '","result":' .. result .. '}')
if events ~= '' then
  appended = events .. ',' .. appended
end
-- The done message carries the job as a read right after this script would find it (the
-- fields of app.store.connection.VIEW_FIELDS), so a long-poll answers without reading it
-- again: not for a job with a callback (its deliveries change the view) nor a large one
-- (every API process hears every message). It is the id, then each field's name and value
-- a line each (no JSON encoding here: the values are stored text, JSON or not, passed on as
-- they are; app.store.jobs reads it), a field the job does not have left out, as a read
-- leaves it out. A value with a line break in it (not written by this version) sends only
-- the id: the API reads the job.
local message = id
local size = #result + #history + #transcript + #(turns or '') + #(f[12] or '')
if not f[9] and size <= tonumber(view_max_bytes) then
  -- HMGET's false is a missing field.
  local view = {'id', id, 'tenant', f[6], 'status', status, 'created_ms', f[10],
    'finished_ms', finished_ms, 'attempts', f[2], 'result', result, 'history', history,
    'transcript', transcript, 'started_ms', f[11], 'turns', turns or false, 'metadata', f[12],
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
    message = id .. '\n' .. table.concat(lines, '\n')
  end
end
finish(job, id, status, result, append(f[4], appended), finished_ms, retention_s,
  done_channel, fields, {f[9], f[8]}, message)
return 1
