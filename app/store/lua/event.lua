-- Append a worker's event, fenced; optionally set the in-progress result in the same step.
-- KEYS: 1 job  2 events.
-- ARGV: 1 token  2 events maxlen  3 name  4 data json  5 in-progress result json or ''.
-- Returns the stream id or nil.
if not fenced(KEYS[1], ARGV[1]) then
  return false
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'result', ARGV[5])
end
return add_event(KEYS[2], ARGV[2], ARGV[3], ARGV[4])
