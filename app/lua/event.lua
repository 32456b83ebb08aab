-- Append a worker's event, fenced. KEYS: 1 job  2 events.
-- ARGV: 1 token  2 events maxlen  3 name  4 data json.  Returns the stream id or nil.
if not fenced(KEYS[1], ARGV[1]) then
  return false
end
return add_event(KEYS[2], ARGV[2], ARGV[3], ARGV[4])
