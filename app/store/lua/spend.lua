-- A cancelled job's spend (#31): the calls its worker made under one claim that the job
-- does not hold yet (a call cut short by the cancel, turns whose write the cancel refused)
-- join its turns and its running total, and when that claim is the job's last the result
-- says what the run spent. Once: a turn the job holds (same claim, same index) is not
-- added again, so a retry after a lost reply changes nothing.
-- Sent: app/store/protocol.py's SpendKeys, SpendArgs (``turns``, ``spends`` and ``ids``
-- hold one item a line, in the same order: compact JSON has no line breaks).
-- Returns how many turns were added, or -1 (the job is not cancelled, or is gone).
local job = unpack(KEYS)
local attempt, result, turns, spends, ids = unpack(ARGV)
local f = redis.call('HMGET', job, 'status', 'attempts', 'turns', 'spent')
if f[1] ~= 'cancelled' then
  return -1
end
local held = {}
if f[3] and f[3] ~= '' and f[3] ~= '[]' then
  for _, t in ipairs(cjson.decode(f[3])) do
    local claim = t.jobAttempt
    if type(claim) ~= 'number' then
      claim = 1
    end
    held[string.format('%d:%d', claim, t.index)] = true
  end
end
local function lines(text)
  local out = {}
  for line in string.gmatch(text, '[^\n]+') do
    out[#out + 1] = line
  end
  return out
end
local spend, id = lines(spends), lines(ids)
local list, total, added = f[3], f[4], 0
for n, turn in ipairs(lines(turns)) do
  if not held[id[n]] then
    held[id[n]] = true
    list = append(list, turn)
    total = add_spend(total, spend[n])
    added = added + 1
  end
end
local fields = {}
if added > 0 then
  fields = {'turns', list, 'spent', total}
end
if tonumber(attempt) == tonumber(f[2]) then
  table.insert(fields, 'result')
  table.insert(fields, result)
end
if #fields > 0 then
  redis.call('HSET', job, unpack(fields))
end
return added
