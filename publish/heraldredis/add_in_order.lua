-- Adds one key's events to their streams in order, stopping at the first
-- XADD that fails so that no event follows a failed one of its key.
-- KEYS: the events' streams. ARGV[1]: MAXLEN, "0" for none. Then, per
-- event, the number of its field and value arguments followed by them.
-- Reply: per event reached, the new entry id, or the error that stopped.
local trim = ARGV[1] ~= '0'
local at = 2
local reply = {}
for i, stream in ipairs(KEYS) do
  local n = tonumber(ARGV[at])
  local args = {stream}
  if trim then
    args[#args + 1] = 'MAXLEN'
    args[#args + 1] = '~'
    args[#args + 1] = ARGV[1]
  end
  args[#args + 1] = '*'
  for j = at + 1, at + n do
    args[#args + 1] = ARGV[j]
  end
  at = at + n + 1
  local id = redis.pcall('XADD', unpack(args))
  reply[i] = id
  if type(id) == 'table' and id.err then
    return reply
  end
end
return reply
