// fuzz-covers: lib/shm/keyed_gcra.cpp lib/shm/segment_header.cpp include/sluice/shm/keyed_gcra.hpp
//
// A shared-memory key table (shm::keyed_gcra) whose bytes another process wrote: any bytes
// as the segment's header (to the attach check, detail::check_header, and to a second
// attach by descriptor) and as the table behind it (the keyed header, the shards' counts,
// floors, hands and locks, the slots' tags, states, generations, sizes and keys), then
// decisions, reservations, refunds, look-ups and a listing over it.
//
// The input: a byte of shape (keys 1-64, shards 1-4, integer keys), patches (an offset in
// the segment, a length, the bytes) until a zero-length patch, then operations until the
// input ends. The table is made on an anonymous segment (a sealed memfd), with a lock
// timeout of 0: a lock the bytes say is held is not waited for.
//
// Checked: no crash, no undefined behaviour, no hang (every loop over the table's bytes is
// bounded); the attach check refuses every header not of the layout; a decision answers
// admitted without an error, or refused, or an error of the table's (corrupt, lock timeout,
// table full, unavailable) or of the request's (count, limit, key); an admission never
// leaves more than the burst; a listing throws only the table's errors and lists keys of
// the sizes the table holds.
#include "fuzz.hpp"

#include <sluice/detail/base/arith.hpp>
#include <sluice/shm/keyed_gcra.hpp>
#include <sluice/shm/segment.hpp>

#include <boost/system/system_error.hpp>

#include <cstring>
#include <optional>
#include <string>

namespace {

using sluice::error;
namespace shm = sluice::shm;

constexpr std::uint64_t burst = 3;
const sluice::rate every_us = sluice::rate::every(std::chrono::microseconds(1));

bool table_error(const boost::system::error_code& ec)
{
    return ec == error::shm_corrupt || ec == error::shm_lock_timeout || ec == error::shm_table_full ||
           ec == error::shm_unavailable;
}

bool request_error(const boost::system::error_code& ec)
{
    return ec == error::invalid_count || ec == error::exceeds_limit || ec == error::shm_key_too_long ||
           ec == error::shm_string_key;
}

void check_decision(const sluice::decision& d)
{
    if (d.admitted) {
        FUZZ_CHECK(!d.error);
        FUZZ_CHECK(d.remaining < burst);
        FUZZ_CHECK(d.retry_after.count() == 0);
    } else if (d.error) {
        FUZZ_CHECK(table_error(d.error) || request_error(d.error));
    } else {
        FUZZ_CHECK(d.retry_after.count() > 0);
    }
}

// The header check on bytes of any kind: whatever it accepts is a header of this layout.
void header_check(fuzz::input& in)
{
    shm::detail::segment_layout layout{shm::keyed_gcra::kind, {1000, 3, 0, 64}, 256, nullptr};
    std::string bytes = in.text();
    const bool valid_start = in.flag();
    if (valid_start && bytes.size() >= sizeof(shm::detail::segment_header)) {
        shm::detail::segment_header h{};
        h.magic = shm::detail::segment_magic;
        h.byte_order = shm::detail::byte_order_mark;
        std::memcpy(bytes.data(), &h, 16);   // magic, then version and header size from the input
        std::memcpy(bytes.data() + 16, &h.byte_order, 8);
    }
    std::array<char, 40> boot{};
    boot[0] = static_cast<char>(in.byte());
    bool stale = true;
    std::string what;
    const std::size_t size = in.flag() ? bytes.size() : static_cast<std::size_t>(in.number());
    error e = shm::detail::check_header(bytes.data(), std::min(size, bytes.size()), layout,
                                        static_cast<std::size_t>(in.byte()), boot, stale, what);
    if (e == error{}) {
        shm::detail::segment_header h;
        FUZZ_CHECK(bytes.size() >= sizeof h);
        std::memcpy(&h, bytes.data(), sizeof h);
        FUZZ_CHECK(h.magic == shm::detail::segment_magic && h.kind == layout.kind);
        FUZZ_CHECK(stale == (h.boot_id != boot));
    } else {
        FUZZ_CHECK(!stale && !what.empty());
        FUZZ_CHECK(e == error::shm_incompatible || e == error::shm_config_mismatch);
    }
}

void run(fuzz::input& in)
{
    const std::uint8_t shape = in.byte();
    const shm::table_options table{.max_keys = 1u + (shape & 63u),
                                   .shards = 1u + ((shape >> 6) & 1u),
                                   .hash_seed = 99,
                                   .integer_keys = (shape & 0x80) != 0};
    if (table.shards > table.max_keys) return;
    shm::segment_options where;
    where.anonymous = true;
    where.lock_timeout = std::chrono::nanoseconds(0);
    shm::keyed_gcra first(where, every_us, burst, table);
    char* base = static_cast<char*>(first.segment().payload()) - shm::detail::payload_offset;
    const std::size_t size = first.segment().size();

    // Patches over the whole segment, header included.
    bool header_patched = false;
    for (int patches = 0; patches < 32; ++patches) {
        const std::size_t len = in.byte();
        if (len == 0) break;
        std::size_t at = in.integer<std::uint16_t>() % size;
        header_patched |= at < shm::detail::payload_offset;
        for (std::size_t i = 0; i < len && at + i < size; ++i) base[at + i] = static_cast<char>(in.byte());
    }

    // A second process's attach, by the descriptor: the header is checked as any other.
    std::optional<shm::keyed_gcra> second;
    try {
        auto again = shm::segment_options::of(first.segment());
        again.lock_timeout = std::chrono::nanoseconds(0);
        second.emplace(again, every_us, burst, table);
    } catch (const boost::system::system_error& e) {
        FUZZ_CHECK(header_patched);
        FUZZ_CHECK(e.code() == error::shm_incompatible || e.code() == error::shm_config_mismatch);
    }
    shm::keyed_gcra& t = second ? *second : first;

    shm::detail::holder_state holder;
    std::int64_t now = 1'000'000'000;
    for (int ops = 0; ops < 64 && !in.empty(); ++ops) {
        const std::uint8_t op = in.byte();
        if (op & 0x80) now = sluice::detail::sat_add(now, in.number());
        const std::uint64_t n = (op >> 4) & 3;   // 0 (refused: invalid_count) to 3
        const bool integer = in.flag();
        const std::uint64_t ikey = in.byte();
        std::string skey = in.text();
        if (skey.size() > 48) skey.resize(48);
        boost::system::error_code ec;
        const auto k = integer ? t.handle(ikey) : t.handle(skey, ec);
        switch (op & 7) {
        case 0:
        case 1: check_decision(integer ? t.try_acquire(ikey, n, now) : t.try_acquire(skey, n, now)); break;
        case 2:
            if (!ec) check_decision(t.try_acquire(k, n, now));
            break;
        case 3:
            if (!ec) check_decision(t.check(k, n, now));
            break;
        case 4:
            if (!ec) {
                auto r = t.reserve(k, n, now, in.number(), holder);
                FUZZ_CHECK(!r.admitted || !r.error);
                FUZZ_CHECK(!r.error || r.error == error::timed_out || table_error(r.error) || request_error(r.error));
            }
            break;
        case 5:
            if (!ec) {
                FUZZ_CHECK(t.refund(k, n, now, holder, in.byte()) >= 0);
                (void)t.predict(k, n, now, in.byte());
            }
            break;
        case 6:
            (void)(integer ? t.contains(ikey) : t.contains(skey));
            FUZZ_CHECK((integer ? t.shard_of(ikey) : t.shard_of(skey)) < t.shards());
            (void)t.size();
            (void)t.repairs();
            FUZZ_CHECK(t.max_keys() == table.max_keys && t.burst() == burst && t.slack().count() == 0);
            FUZZ_CHECK(t.rate().interval() == every_us.interval());
            FUZZ_CHECK(t.segment().name().empty() && t.segment().created() == !second);
            break;
        default:
            try {
                for (const auto& key : t.keys()) {
                    FUZZ_CHECK(key.shard < t.shards());
                    FUZZ_CHECK(key.integer || key.key.size() <= shm::keyed_gcra::max_key_size);
                    FUZZ_CHECK(!(key.integer == false && t.integer_keys()));
                }
            } catch (const boost::system::system_error& e) {
                FUZZ_CHECK(table_error(e.code()));
            }
            break;
        }
        // Bytes written between two operations, as by a process running beside us.
        if (op & 8) {
            std::size_t at = shm::detail::payload_offset + in.integer<std::uint16_t>() % (size - shm::detail::payload_offset);
            base[at] = static_cast<char>(in.byte());
        }
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    if (in.flag()) {
        header_check(in);
        return 0;
    }
    run(in);
    return 0;
}
