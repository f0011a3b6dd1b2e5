// The Lua scripts the Redis limiters run: GCRA (token bucket) with reservations, the
// refund of a reservation, and a sliding window log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::redis::lua {

/// \namespace sluice::redis::lua
/// The Lua scripts the Redis limiters run, one atomic decision each on the server's clock.
///
/// Every time and duration in the scripts is an integer number of microseconds on the
/// Redis server's clock (`TIME`): one clock for every process and host, and no client
/// clock in any decision. Lua numbers are doubles, exact for integers below 2^53, so the
/// scripts refuse (an error reply, nothing changed) any argument that could take a value
/// there: interval_us * burst and max_wait_us are at most 2^51 us (71 years) each, and
/// now + interval_us * burst + max_wait_us must stay below 2^53. Every number handed to a
/// Redis command is formatted with "%.0f" (Lua's default "%.14g" would round a 16-digit
/// timestamp).
///
/// KEYS[2], when given, is the key's configuration hash ("{prefix:key}:cfg", the same
/// hash slot): written by the *_configure scripts (the limiters' set_rate, set_burst,
/// set_limit, set_window), it replaces the configuration in ARGV, so that every process
/// follows a change on its next call.
///
/// Replies are arrays of six integers (nine for the GCRA scripts):
///   [0] 1 when granted (committed), 0 when not;
///   [1] wait: when granted, how long until the permits may be used (0: now; > 0: a
///       reservation in the future); when refused, how long until the same request would
///       be granted (retry_after), > 0;
///   [2] remaining: permits that could be granted at once after this call;
///   [3] reset_after: how long until the limiter is back to full and idle;
///   [4] now: the server's time used for the decision (the client estimates its clock
///       offset from it);
///   [5] the state after the call (GCRA: z, the instant the bucket is empty; the refund
///       script compares it). 0 for the sliding log.
///   [6] (GCRA) permits taken: n when granted (lease: the slots reserved), 0 when refused.
///   [7], [8] (GCRA) the interval_us and burst the call used.
/// A refusal with [1] = 0 means n exceeds the burst (the limit) in force: it can never
/// be granted.
///
/// The optional last argument `now_us` replaces the server's TIME. It exists ONLY for
/// tests, which feed the same arrivals to a script and to a local policy; a limiter never
/// sends it. Keys written under it get 60 s more TTL, so that a simulated clock that runs
/// slower than the real one never sees a key expire before its state is back to fresh.
///
/// Keys expire (PX) once their state is back to that of a new limiter, never earlier, so
/// an idle key costs nothing and expiry never hands out extra permits.
///
/// Since Redis 5 scripts replicate their effects, not the script; Redis 7 does so always,
/// so reading TIME before writing is allowed (tests/test_redis_scripts.cpp checks it on
/// the server it starts).

namespace detail {

// A script's text known at compile time: the shared prelude, then its own body.
template <std::size_t N>
struct script_text {
    char data[N];
    constexpr std::string_view view() const noexcept { return {data, N - 1}; }
};

// Every script starts with the same definitions: LIM (2^51), fmt (a number as Redis takes
// it), int_arg (an integer argument in range, or an error reply; each script calls it once
// per argument: a table of {name, lo, hi} specs cost the server a microsecond a call),
// config_args (the caller's configuration, ARGV[1] and ARGV[2], which every script of a
// family takes first: interval_us and burst, or limit and window_us), clock
// (the test-only now_us argument i, or the server's TIME, and the extra TTL of keys written
// under a simulated clock), config (the key's configuration hash KEYS[2], when given,
// replaces two values; an error reply when it is not a valid one), gcra_config (GCRA's
// interval and burst in force, their product tau at most LIM, and the clock), stored (the
// integer state at KEYS[1], nil when there is none).
inline constexpr char prelude[] = R"lua(
local LIM = 2251799813685248
local function fmt(x) return string.format('%.0f', x) end
local function int_arg(i, name, lo, hi)
  local v = tonumber(ARGV[i])
  if v == nil or v ~= math.floor(v) or v < lo or v > hi then
    return nil, redis.error_reply('ERR sluice: ' .. name .. ' must be an integer in [' .. fmt(lo) .. ', ' .. fmt(hi) .. '], got ' .. tostring(ARGV[i]))
  end
  return v
end
local function config_args(na, ha, nb, hb)
  local a, e = int_arg(1, na, 1, ha)
  if e then return nil, nil, e end
  local b; b, e = int_arg(2, nb, 1, hb)
  return a, b, e
end
local function clock(i)
  if ARGV[i] ~= nil and ARGV[i] ~= '' then
    local v, e = int_arg(i, 'now_us', -LIM, LIM)
    return v, 60000, e
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), 0, nil
end
local function config(fa, fb, a, b, ha, hb)
  if not KEYS[2] then return a, b, nil end
  local cfg = redis.pcall('HMGET', KEYS[2], fa, fb)
  if type(cfg) == 'table' and cfg.err then
    return nil, nil, redis.error_reply('ERR sluice: key ' .. KEYS[2] .. ': ' .. cfg.err)
  end
  if not (cfg[1] and cfg[2]) then return a, b, nil end
  local x, y = tonumber(cfg[1]), tonumber(cfg[2])
  if not x or not y or x < 1 or y < 1 or x > ha or y > (hb or ha) then
    return nil, nil, redis.error_reply('ERR sluice: key ' .. KEYS[2] .. ' does not hold a valid configuration')
  end
  return x, y, nil
end
local function gcra_config(interval, burst, clock_arg)
  local e
  interval, burst, e = config('interval', 'burst', interval, burst, LIM)
  if e then return nil, nil, nil, nil, nil, e end
  if interval * burst > LIM then
    return nil, nil, nil, nil, nil, redis.error_reply('ERR sluice: interval_us * burst exceeds 2^51 us')
  end
  local now, extra_ttl
  now, extra_ttl, e = clock(clock_arg)
  return interval, burst, interval * burst, now, extra_ttl, e
end
local function stored()
  local raw = redis.pcall('GET', KEYS[1])
  if type(raw) == 'table' and raw.err then
    return nil, redis.error_reply('ERR sluice: key ' .. KEYS[1] .. ': ' .. raw.err)
  end
  if not raw then return nil, nil end
  local v = tonumber(raw)
  if v == nil or v ~= math.floor(v) then
    return nil, redis.error_reply('ERR sluice: key ' .. KEYS[1] .. ' does not hold an integer')
  end
  return v, nil
end
)lua";

template <std::size_t N>
consteval script_text<sizeof(prelude) + N - 1> with_prelude(const char (&body)[N])
{
    script_text<sizeof(prelude) + N - 1> out{};
    for (std::size_t i = 0; i + 1 < sizeof(prelude); ++i) out.data[i] = prelude[i];
    for (std::size_t i = 0; i < N; ++i) out.data[sizeof(prelude) - 1 + i] = body[i];
    return out;
}

} // namespace detail

namespace detail {
inline constexpr auto gcra_text = with_prelude(R"lua(
local arg_interval, arg_burst, e = config_args('interval_us', LIM, 'burst', LIM) if e then return e end
local n; n, e = int_arg(3, 'n', 1, LIM) if e then return e end
local max_wait; max_wait, e = int_arg(4, 'max_wait_us', 0, LIM) if e then return e end
local mode = ARGV[5]
if mode ~= 'try' and mode ~= 'reserve' and mode ~= 'lease' and mode ~= 'peek' then
  return redis.error_reply('ERR sluice: mode must be try, reserve, lease or peek, got ' .. tostring(mode))
end
local interval, burst, tau, now, extra_ttl
interval, burst, tau, now, extra_ttl, e = gcra_config(arg_interval, arg_burst, 6) if e then return e end
if now + tau + max_wait >= 9007199254740992 then
  return redis.error_reply('ERR sluice: now + interval_us * burst + max_wait_us exceeds 2^53 us')
end
local v
v, e = stored() if e then return e end
local z = now - tau
if v and v > z then z = v end
local function avail(zz)
  if zz >= now then return 0 end
  local lag = now - zz
  if lag > tau then lag = tau end
  local k = math.floor(lag / interval)
  if k * interval > lag then k = k - 1 end
  if k > burst then k = burst end
  return k
end
local function reset(zz)
  local r = zz + tau - now
  if r < 0 then return 0 end
  return r
end
if n > burst and mode ~= 'lease' then return {0, 0, avail(z), reset(z), now, z, 0, interval, burst} end
if mode == 'lease' then
  local fit = math.floor((now + max_wait - z) / interval)
  if fit < n then n = fit end
  if n < 1 then return {0, z + interval - now, avail(z), reset(z), now, z, 0, interval, burst} end
end
local nz = z + n * interval
local wait = nz - now
if ((mode == 'try' or mode == 'peek') and wait > 0) or (mode == 'reserve' and wait > max_wait) then
  return {0, wait, avail(z), reset(z), now, z, 0, interval, burst}
end
if mode == 'peek' then return {1, 0, avail(nz), reset(nz), now, nz, n, interval, burst} end
redis.call('SET', KEYS[1], fmt(nz), 'PX', fmt(math.ceil((nz + tau - now) / 1000) + extra_ttl))
if wait < 0 then wait = 0 end
return {1, wait, avail(nz), reset(nz), now, nz, n, interval, burst}
)lua");
} // namespace detail
/// GCRA, as policy::gcra with no slack. KEYS[1]: z, an integer string; [KEYS[2]]: the
/// configuration hash.
/// ARGV: interval_us, burst, n, max_wait_us, mode, [now_us].
/// mode "try": grant now or refuse (max_wait_us is ignored). mode "reserve": commit the
/// earliest slot for n permits when its wait is at most max_wait_us (FIFO: each
/// reservation queues behind the previous ones), else refuse and consume nothing.
/// mode "lease": commit the next k = min(n, as many as end within max_wait_us) slots,
/// one interval apart, k >= 1 (n may exceed the burst: the slots are consecutive future
/// ones, each used no earlier than its time); [1] is the wait of the last slot, [6] is k;
/// refused when not even one slot ends within max_wait_us ([1]: the wait of that slot).
/// mode "peek": the reply of "try", nothing written (the key is only read).
inline constexpr std::string_view gcra = detail::gcra_text.view();

namespace detail {
inline constexpr auto gcra_settle_text = with_prelude(R"lua(
local arg_interval, arg_burst, e = config_args('interval_us', LIM, 'burst', LIM) if e then return e end
local cost; cost, e = int_arg(3, 'cost', 1, LIM) if e then return e end
local actual; actual, e = int_arg(4, 'actual', 0, LIM) if e then return e end
local interval, burst, tau, now, extra_ttl
interval, burst, tau, now, extra_ttl, e = gcra_config(arg_interval, arg_burst, 5) if e then return e end
local v
v, e = stored() if e then return e end
local z = now - tau
if v and v > z then z = v end
local nz = z + (actual - cost) * interval
if nz < now - tau then nz = now - tau end
if nz > 9007199254740991 - tau then nz = 9007199254740991 - tau end
local ttl = math.ceil((nz + tau - now) / 1000) + extra_ttl
if ttl > 0 then
  redis.call('SET', KEYS[1], fmt(nz), 'PX', fmt(ttl))
else
  redis.call('DEL', KEYS[1])
end
return {1, 0, 0, 0, now, nz}
)lua");
} // namespace detail
/// Settles a GCRA admission of `cost` permits with its `actual` cost, as policy::gcra's
/// settle: z moves by (actual - cost) intervals; back no further than a full bucket at
/// now, forward with no check of the burst (a debt later callers wait for). A key that
/// expired meanwhile is a full bucket (a debt is then charged from a full bucket).
/// KEYS[1], [KEYS[2]]: as gcra. ARGV: interval_us, burst, cost, actual, [now_us].
/// Reply: [0] 1, [1]..[3] 0, [4] now, [5] the state after the call.
inline constexpr std::string_view gcra_settle = detail::gcra_settle_text.view();

namespace detail {
inline constexpr auto gcra_refund_text = with_prelude(R"lua(
local arg_interval, arg_burst, e = config_args('interval_us', LIM, 'burst', LIM) if e then return e end
local n; n, e = int_arg(3, 'n', 1, LIM) if e then return e end
local expected; expected, e = int_arg(4, 'expected_z', -LIM, 2 * LIM) if e then return e end
local interval, burst, tau, now, extra_ttl
interval, burst, tau, now, extra_ttl, e = gcra_config(arg_interval, arg_burst, 5) if e then return e end
local z
z, e = stored() if e then return e end
if not z then return {0, 0, 0, 0, now, 0} end
if z ~= expected then return {0, 0, 0, 0, now, z} end
local nz = z - n * interval
if nz < now - tau then nz = now - tau end
if nz >= z then return {0, 0, 0, 0, now, z} end
local ttl = math.ceil((nz + tau - now) / 1000) + extra_ttl
if ttl > 0 then
  redis.call('SET', KEYS[1], fmt(nz), 'PX', fmt(ttl))
else
  redis.call('DEL', KEYS[1])
end
return {1, z - nz, 0, 0, now, nz}
)lua");
} // namespace detail
/// Gives back a GCRA reservation of n permits, compare-and-set style: only when the
/// state still equals `expected_z` (the state right after that reservation), so that no
/// later reservation depended on it; otherwise changes nothing. The bucket never ends up
/// fuller than its burst. KEYS[1], [KEYS[2]]: as gcra. ARGV: interval_us, burst, n, expected_z,
/// [now_us]. Reply: [0] 1 when refunded, [1] how far z moved back (us), [2] 0, [3] 0,
/// [4] now, [5] the state after the call.
inline constexpr std::string_view gcra_refund = detail::gcra_refund_text.view();

namespace detail {
inline constexpr auto sliding_log_text = with_prelude(R"lua(
local arg_limit, arg_window, e = config_args('limit', 16777216, 'window_us', LIM) if e then return e end
-- The requests, decided in order: n at 3 and its ticket at 5, then one (n, ticket) pair
-- each from 6 on. All are checked before anything is written: a bad one fails the call
-- with nothing decided.
local ns, tickets = {}, {}
local i = 3
repeat
  local n; n, e = int_arg(i, 'n', 1, LIM) if e then return e end
  local t = ARGV[i == 3 and 5 or i + 1]
  if t == '' then t = false end
  if t and not tonumber(string.match(t, '^(%d+):')) then
    return redis.error_reply('ERR sluice: ticket must be deadline_us:n:id')
  end
  ns[#ns + 1] = n
  tickets[#tickets + 1] = t or false
  if i == 3 then i = 6 else i = i + 2 end
until ARGV[i] == nil
local limit, window, now, extra_ttl
limit, window, e = config('limit', 'window', arg_limit, arg_window, 16777216, LIM) if e then return e end
now, extra_ttl, e = clock(4) if e then return e end
if now + 2 * window >= 9007199254740992 then
  return redis.error_reply('ERR sluice: now + 2 * window_us exceeds 2^53 us')
end
local key = KEYS[1]
local q = KEYS[3]
local out = {}
-- What every decision of the call reads, read once (on the first request the limit does not
-- refuse outright) and then kept up to date here: the log's count after the trim, its
-- newest stamp, the permits already at the stamp of this call's grants (all grants of one
-- call share it), and whether the waiters' queue exists.
local ready = false
local count, newest, had_last, stored_newest, at_stamp, queued
local stamp, s
-- The grants' members, added to the log in as few ZADDs as can be: before the log is read
-- again (a refusal's wait), and at the end.
local adds = {}
local function add()
  if #adds > 0 then
    redis.call('ZADD', key, unpack(adds))
    adds = {}
  end
end
for r = 1, #ns do
  local n, ticket = ns[r], tickets[r]
  if n > limit then
    out[#out + 1] = 0 out[#out + 1] = 0 out[#out + 1] = 0 out[#out + 1] = 0 out[#out + 1] = now out[#out + 1] = 0
  else
    if not ready then
      local t = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', fmt(now - window))
      if type(t) == 'table' and t.err then
        return redis.error_reply('ERR sluice: key ' .. key .. ': ' .. t.err)
      end
      count = redis.call('ZCARD', key)
      newest = now - window
      local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      had_last = last[2] ~= nil
      if had_last then newest = tonumber(last[2]) end
      stored_newest = newest
      stamp = now
      if newest > stamp then stamp = newest end
      ready = true
    end
    -- The waiters' queue: permits the live tickets before ours (all of them for a request
    -- without a ticket) still wait for; tickets past their deadline are dropped. Read in
    -- chunks, and only as far as the answer needs: once the tickets read hold more than the
    -- window has room for, this request waits whatever follows (a refusal's room is then 0).
    -- A waiter stopped short of its ticket counts each ticket between as one permit more
    -- (ZRANK, without reading them), so that its wait is when the entries leave that make
    -- room for all of them and its own, not a wake-up for each entry that leaves (exact for
    -- waiters of one permit each). Most calls without a ticket find no queue:
    -- EXISTS tells so for about a third of what a ZRANGE of the missing key costs (a queue of
    -- the wrong type is still found by the ZRANGE); a waiter's call, whose ticket is
    -- queued, reads the queue at once.
    local ahead = 0
    local partial = false
    local read = 0
    if q and not ticket and queued == nil then queued = redis.call('EXISTS', q) == 1 end
    if q and (ticket or queued) then
      local from = 0
      local done = false
      while not done do
        local entries = redis.pcall('ZRANGE', q, from, from + 15)
        if type(entries) == 'table' and entries.err then
          add()
          return redis.error_reply('ERR sluice: key ' .. q .. ': ' .. entries.err)
        end
        if #entries == 0 then break end
        local kept = 0
        for _, m in ipairs(entries) do
          if m == ticket then done = true break end
          local dl, k = string.match(m, '^(%d+):(%d+):')
          dl = tonumber(dl)
          k = tonumber(k)
          if dl == nil or k == nil or dl < now then
            redis.call('ZREM', q, m)
          else
            kept = kept + 1
            read = read + 1
            ahead = ahead + k
            if count + ahead + n > limit then
              done = true
              partial = true
              break
            end
          end
        end
        if #entries < 16 then break end
        from = from + kept
      end
      if partial and ticket then
        local p = redis.call('ZRANK', q, ticket)
        if not p then p = redis.call('ZCARD', q) end
        if p > read then ahead = ahead + (p - read) end
      end
    end
    if count + ahead + n > limit then
      local need = count + ahead + n - limit
      local wait = window
      if need <= count then
        add()
        local nth = redis.call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')
        wait = tonumber(nth[2]) + window - now
      end
      if wait < 1 then wait = 1 end
      if ticket then
        local dl = tonumber(string.match(ticket, '^(%d+):'))
        redis.call('ZADD', q, 'NX', fmt(now), ticket)
        queued = true
        local ttl = math.ceil((dl - now) / 1000) + 1000
        if ttl > redis.call('PTTL', q) then redis.call('PEXPIRE', q, fmt(ttl)) end
      end
      local room = limit - count - ahead
      if room < 0 or partial then room = 0 end
      local reset = newest + window - now
      if reset < 0 then reset = 0 end
      out[#out + 1] = 0 out[#out + 1] = wait out[#out + 1] = room out[#out + 1] = reset out[#out + 1] = now out[#out + 1] = 0
    else
      if ticket then redis.call('ZREM', q, ticket) end
      -- Members of one stamp are numbered on from those already there: only a stamp equal
      -- to the stored newest can have any before this call.
      if at_stamp == nil then
        at_stamp = 0
        if had_last and stamp == stored_newest then at_stamp = redis.call('ZCOUNT', key, fmt(stamp), fmt(stamp)) end
        s = fmt(stamp)
      end
      for j = at_stamp + 1, at_stamp + n do
        adds[#adds + 1] = s
        adds[#adds + 1] = s .. ':' .. fmt(j)
        if #adds >= 2000 then add() end
      end
      at_stamp = at_stamp + n
      out[#out + 1] = 1 out[#out + 1] = 0 out[#out + 1] = limit - count - ahead - n
      out[#out + 1] = stamp + window - now out[#out + 1] = now out[#out + 1] = 0
      count = count + n
      newest = stamp
    end
  end
end
add()
-- The log must outlive its newest stamp by a window. Its expiry is set once per window-long
-- epoch of the stamps, to the end of the next epoch: later stamps of the same epoch are
-- covered (sliding_log_configure sets it again when the window changes).
if at_stamp ~= nil then
  local epoch = math.floor(stamp / window)
  if not had_last or math.floor(stored_newest / window) ~= epoch then
    redis.call('PEXPIRE', key, fmt(math.ceil(((epoch + 2) * window - now) / 1000) + extra_ttl))
  end
end
return out
)lua");
} // namespace detail
/// Sliding window log, as policy::sliding_log: at no instant t do more than `limit`
/// permits carry timestamps in (t - window, t]. KEYS[1]: a sorted set of permits scored
/// by their timestamp; members are "stamp:k", unique because all permits of one stamp
/// are added and removed together. Stamps never go back: a server clock that steps back
/// (a failover) stamps at the newest stamp seen, which can only delay later grants.
/// [KEYS[2]]: the configuration hash. [KEYS[3]]: the waiters' queue, a sorted set of
/// tickets "deadline_us:n:id" in the order of their first refusal: a request is granted
/// only when the window has room for it AND for every live ticket before it (all of them
/// for a request without a ticket), so waiters are served first come, first served
/// across processes and a try never overtakes them; a ticket is dropped when granted,
/// when its holder leaves (sliding_log_leave) or once past its deadline.
/// ARGV: limit (1..2^24), window_us, n, [now_us] ('' for the server's), [ticket] ('':
/// none), then, for a batch, one more request per pair: n, ticket ('': none).
/// A batch is decided in order at one instant, exactly as that many calls in a row would
/// be: the reply is six integers per request, in the order of the requests (six for one).
/// Its fixed part (arguments, configuration, TIME, the trim, the log's count and newest
/// stamp, whether a queue exists, the expiry) is paid once a call: a process sends the
/// requests of one key that wait while its previous call is in flight as one batch.
/// Every argument is checked before anything is written (an error reply decides nothing);
/// a wrong-type queue met after grants of the same batch fails the call with those grants
/// consumed.
/// Never reserves ahead. A refusal's [1]: when the window holds enough entries, when they
/// leave; otherwise one window. The queue is read only as far as the answer needs (in
/// chunks, until our ticket or until the tickets read fill the window's room); a refusal
/// that stopped there reports [2] 0, and a waiter's counts each unread ticket before its
/// own as one permit (ZRANK): a lower bound of its wait when every ticket before it is
/// live (one of a waiter that died and did not leave counts until its deadline).
inline constexpr std::string_view sliding_log = detail::sliding_log_text.view();

/// Leaves the waiters' queue of a sliding window (a waiter that gave up). KEYS[1]: the
/// queue; ARGV[1]: the ticket.
inline constexpr std::string_view sliding_log_leave = R"lua(
redis.call('ZREM', KEYS[1], ARGV[1])
return {1, 0, 0, 0, 0, 0}
)lua";

namespace detail {
inline constexpr auto gcra_configure_text = with_prelude(R"lua(
local arg_interval, arg_burst, e = config_args('interval_us', LIM, 'burst', LIM) if e then return e end
local ni; ni, e = int_arg(3, 'new_interval_us', 0, LIM) if e then return e end
local nb; nb, e = int_arg(4, 'new_burst', 0, LIM) if e then return e end
local oi, ob, otau, now, extra_ttl
oi, ob, otau, now, extra_ttl, e = gcra_config(arg_interval, arg_burst, 5) if e then return e end
if ni == 0 then ni = oi end
if nb == 0 then nb = ob end
if ni * nb > LIM then return redis.error_reply('ERR sluice: interval_us * burst exceeds 2^51 us') end
local ntau = ni * nb
local v
v, e = stored() if e then return e end
local z = now - otau
if v and v > z then z = v end
-- The credit (z before now) or debt (after) in whole permits of the old interval stays
-- the same number of permits of the new one; the part of a permit is scaled, rounded
-- against the caller (down for a credit, up for a debt; a product beyond 2^53 is off by
-- less than 0.25 us before rounding, so a margin covers it).
local function rescale(d, up)
  local q = math.floor(d / oi)
  local r = d - q * oi
  if r < 0 then q = q - 1 r = r + oi end
  if r >= oi then q = q + 1 r = r - oi end
  local f = r * ni / oi
  if r * ni >= 9007199254740992 then
    if up then f = f + 0.25 else f = f - 0.25 end
  end
  if up then f = math.ceil(f) else f = math.floor(f) end
  if f < 0 then f = 0 end
  local x = q * ni + f
  if x > LIM then x = LIM end
  return x
end
local nz = z
if ni ~= oi then
  if z < now then nz = now - rescale(now - z, false) else nz = now + rescale(z - now, true) end
end
if nz < now - ntau then nz = now - ntau end
if nz + ntau <= now then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], fmt(nz), 'PX', fmt(math.ceil((nz + ntau - now) / 1000) + extra_ttl))
end
redis.call('HSET', KEYS[2], 'interval', fmt(ni), 'burst', fmt(nb))
local k = 0
if nz < now then
  k = math.floor((now - nz) / ni)
  if k > nb then k = nb end
end
local r = nz + ntau - now
if r < 0 then r = 0 end
return {1, 0, k, r, now, nz, 0, ni, nb}
)lua");
} // namespace detail
/// Changes the configuration of one GCRA key: KEYS[1] the state (as gcra), KEYS[2] the
/// configuration hash (fields interval, burst; no expiry), which every script on the key
/// reads before its arguments. ARGV: interval_us, burst (the caller's configuration, used
/// while the key has none), new_interval_us (0: keep), new_burst (0: keep), [now_us].
/// The permits available now are kept across the change, capped by the new burst, and a
/// debt stays a debt of the same number of permits (as policy::gcra's set_rate and
/// set_burst): the rescaled credit or debt is exact to 1 us, rounded against the caller.
/// Reply: as gcra's, [0] 1, [7] and [8] the new interval and burst.
inline constexpr std::string_view gcra_configure = detail::gcra_configure_text.view();

namespace detail {
inline constexpr auto sliding_log_configure_text = with_prelude(R"lua(
local arg_limit, arg_window, e = config_args('limit', 16777216, 'window_us', LIM) if e then return e end
local nl; nl, e = int_arg(3, 'new_limit', 0, 16777216) if e then return e end
local nw; nw, e = int_arg(4, 'new_window_us', 0, LIM) if e then return e end
local ol, ow, now, extra_ttl
ol, ow, e = config('limit', 'window', arg_limit, arg_window, 16777216, LIM) if e then return e end
now, extra_ttl, e = clock(5) if e then return e end
if nl == 0 then nl = ol end
if nw == 0 then nw = ow end
redis.call('HSET', KEYS[2], 'limit', fmt(nl), 'window', fmt(nw))
if nw ~= ow then
  -- The log's expiry follows epochs of the window (see sliding_log): cover the new one.
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then
    local newest = tonumber(last[2])
    local ttl = math.ceil(((math.floor(newest / nw) + 2) * nw - now) / 1000) + extra_ttl
    if ttl > redis.call('PTTL', KEYS[1]) then redis.call('PEXPIRE', KEYS[1], fmt(ttl)) end
  end
end
return {1, 0, 0, 0, now, 0, 0, nw, nl}
)lua");
} // namespace detail
/// Changes the configuration of one sliding-window key: KEYS[1] the log (as
/// sliding_log), KEYS[2] the configuration hash (fields limit, window; no expiry). ARGV:
/// limit, window_us (the caller's, used while the key has none), new_limit (0: keep),
/// new_window_us (0: keep). The permits in the log stay: consumed stays consumed. Reply:
/// {1, 0, 0, 0, now, 0, 0, new_window_us, new_limit}.
inline constexpr std::string_view sliding_log_configure = detail::sliding_log_configure_text.view();

/// The largest interval_us * burst, max_wait_us and window_us the scripts accept: 2^51 us.
inline constexpr std::int64_t max_span_us = std::int64_t{1} << 51;

} // namespace sluice::redis::lua
