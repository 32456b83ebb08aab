-- Commit a job's end, fenced: a worker that lost its lease commits nothing.
-- KEYS: 1 job  2 leases  3 turns  4 events
-- ARGV: 1 id  2 token  3 status  4 result json  5 history json  6 transcript json
--       7 job_end data json  8 retention s  9 events maxlen
if not fenced(KEYS[1], ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'result', ARGV[4], 'history', ARGV[5],
  'transcript', ARGV[6], 'finished_ms', now_ms())
redis.call('HDEL', KEYS[1], 'token')
redis.call('ZREM', KEYS[2], ARGV[1])
-- The end event goes in before the expiry so readers of the stream always see it.
add_event(KEYS[4], ARGV[9], 'job_end', ARGV[7])
expire_job(KEYS[1], KEYS[3], KEYS[4], ARGV[8])
return 1
