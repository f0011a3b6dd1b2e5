// The conversion behind tsc_clock: readings of a counter (the CPU's time-stamp counter) to
// nanoseconds on a reference clock's time line (steady_clock), as a chain of straight
// lines. Sans-io: it reads no clock itself. The readings come from a Source, the machine's
// (lib/tsc_clock.cpp) or a test's simulated counter and reference
// (tests/test_tsc_timeline.cpp), so that jumps, frequency changes and clocksource changes
// are tested without waiting for them to happen.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <mutex>

namespace sluice::detail {

/// A reading of the counter and one of the reference, taken together: the reference was
/// read between two counter reads `width` ticks apart, and `counter` is their mid-point.
struct tsc_sample {
    std::uint64_t counter = 0;
    std::int64_t ns = 0;
    std::uint64_t width = 0;
};

/// What a tsc_timeline reads, through its slow path only (the fast path takes the counter
/// from its caller):
///   counter():   the counter now;
///   reference(): the reference clock now, in nanoseconds (steady_clock);
///   sample():    a tsc_sample now;
///   counter_allowed():     whether the counter may serve at all (not disabled by the
///                          user, invariant): asked once, at the decision;
///   kernel_uses_counter(): whether the kernel keeps its own time with the counter: asked
///                          at the decision, then at most once per check_interval_ns and
///                          after every anomaly (a counter that disagrees with the reference).
template <class S>
concept tsc_source = requires(S& s) {
    { s.counter() } noexcept -> std::same_as<std::uint64_t>;
    { s.reference() } noexcept -> std::same_as<std::int64_t>;
    { s.sample() } noexcept -> std::same_as<tsc_sample>;
    { s.counter_allowed() } noexcept -> std::same_as<bool>;
    { s.kernel_uses_counter() } noexcept -> std::same_as<bool>;
};

inline std::int64_t tsc_scale(std::uint64_t ticks, std::uint64_t mult) noexcept
{
    __extension__ typedef unsigned __int128 u128;
    return static_cast<std::int64_t>((static_cast<u128>(ticks) * mult) >> 32);
}

/// Counter ticks to nanoseconds on the reference's time line.
///
/// Modes: undecided (before the decision), calibrating (the reference is read while the
/// counter's rate is measured: at least calibration_ns after the decision, without
/// blocking anyone), on_counter (the lines below), on_reference (the reference plus a
/// constant offset: where the counter is not a clock, or once it stopped being one; the
/// offset is what keeps the readings monotonic across that switch, 0 when it never ran on
/// the counter).
///
/// Lines: each line maps the counter range [tsc0, tsc0 + hard) linearly to nanoseconds;
/// readers serve [tsc0, tsc0 + span) lock-free; in the last `hard - span` ticks (the lead)
/// the first reader to get the lock computes the next line, which starts exactly where
/// this one ends (one non-decreasing function of the counter for every thread). A line is
/// written into a ring of four under a sequence number (gen), so that readers need no lock.
///
/// Anomalies: at each new line the counter's advance since the previous one is compared
/// with the reference's. A counter that went back, leapt ahead, or ran at another rate
/// (beyond rel_tol) restarts the lines at the current reading, from the reference, never
/// below what the current line can have served (its end); a reader that finds the counter
/// behind its line's start (a reset at resume, a snapshot restored, a migration) does this
/// at once. Two anomalies in a row measure the counter's new rate over the clean span
/// between them. More than max_anomalies within anomaly_window_ns (counters that do not
/// agree across cores) or a kernel no longer keeping time with the counter: on_reference
/// for good.
///
/// Thread-safety: the readers (read, read_line, from_reference, now) from any number of
/// threads; the writers hold `lock_` (now_slow and decide take it).
class tsc_timeline {
public:
    /// The modes (see above).
    enum : int { undecided = 0, on_counter = 1, on_reference = 2, calibrating = 3 };

    /// The length of a line, and of the lead in which the next one is computed.
    static constexpr std::int64_t period_ns = 8'000'000;
    static constexpr std::int64_t lead_ns = 100'000;
    /// The least span of the reference over which the counter's rate is first measured.
    static constexpr std::int64_t calibration_ns = 1'000'000;
    /// How far ahead of the reference the first line starts: more than the calibration's
    /// error, so that no reading of the reference served before the switch is ahead of a
    /// reading of the line after it, in any thread.
    static constexpr std::int64_t switch_margin_ns = 2'000;
    /// Behind the reference by more than this at a line's start: step forward.
    static constexpr std::int64_t step_ns = 20'000;
    /// A line's slope differs from the measured rate by at most max_slew, or runs up to
    /// max_slow slow while the clock is ahead of the reference by more than step_ns.
    static constexpr double max_slew = 0.01;
    static constexpr double max_slow = 0.10;
    /// The counter's advance may differ from the reference's by this fraction (plus the
    /// samples' widths and tolerance_ns) before it counts as an anomaly.
    static constexpr double rel_tol = 0.005;
    static constexpr std::int64_t tolerance_ns = 2'000;
    /// A line started at an anomaly is this long, so that the next check comes soon.
    static constexpr std::int64_t restart_ns = 1'000'000;
    /// The kernel's clocksource is asked at most this often (and after every anomaly).
    static constexpr std::int64_t check_interval_ns = 1'000'000'000;
    /// More anomalies than this within the window: the counter is not a clock here.
    static constexpr int max_anomalies = 8;
    static constexpr std::int64_t anomaly_window_ns = 60'000'000'000;
    /// The rate is measured from a sample between rebase_ns and 2 * rebase_ns old.
    static constexpr std::int64_t rebase_ns = 2'000'000'000;

    constexpr tsc_timeline() noexcept = default;
    tsc_timeline(const tsc_timeline&) = delete;
    tsc_timeline& operator=(const tsc_timeline&) = delete;

    /// The mode (see the enum).
    int mode(std::memory_order order = std::memory_order_acquire) const noexcept { return mode_.load(order); }

    /// The generation of the line in use: 1 for the first, one more per line.
    std::uint64_t generation() const noexcept { return current_.load(std::memory_order_acquire); }

    /// Added to the reference in mode on_reference.
    std::int64_t offset() const noexcept { return offset_.load(std::memory_order_relaxed); }

    /// The hot path, mode on_counter: true and `ns` when the line in use serves the
    /// reading of counter() (called after the line is loaded, as one read would).
    template <class Counter>
    [[gnu::always_inline]] bool read_line(Counter&& counter, std::int64_t& ns) const noexcept
    {
        const snapshot s = load<false>(counter);
        const std::uint64_t d = s.t - s.tsc0;
        if (d < s.span && s.consistent) [[likely]] {
            ns = s.ns0 + tsc_scale(d, s.mult);
            return true;
        }
        return false;
    }

    /// The reference's reading on this timeline (mode on_reference).
    std::int64_t from_reference(std::int64_t ref) const noexcept
    {
        std::int64_t v;
        return __builtin_add_overflow(ref, offset(), &v) ? std::numeric_limits<std::int64_t>::max() : v;
    }

    /// One reading, whatever the mode (the fast path, then the slow one).
    template <tsc_source Source>
    std::int64_t now(Source& src) noexcept
    {
        if (mode(std::memory_order_acquire) == on_counter) {
            std::int64_t ns;
            if (read_line([&src]() noexcept { return src.counter(); }, ns)) return ns;
        }
        return now_slow(src);
    }

    /// Decides the mode if not done yet: on_reference when the counter may not serve,
    /// otherwise calibrating from a first sample. Meant to be called once at load.
    template <tsc_source Source>
    void decide(Source& src) noexcept
    {
        std::lock_guard g(lock_);
        decide_locked(src);
    }

    /// Everything but the fast path: the decision, calibration, the reference, the lead
    /// and a line that does not serve the counter (behind its start, or past its end).
    template <tsc_source Source>
    std::int64_t now_slow(Source& src) noexcept
    {
        for (;;) {
            switch (mode_.load(std::memory_order_acquire)) {
            case on_counter: {
                const reading r = read([&src]() noexcept { return src.counter(); });
                if (r.what == reading::value) return r.ns;
                if (r.what == reading::due) {
                    // The next line is due: whoever gets the lock computes it; the others
                    // go on with this one, still valid.
                    std::unique_lock g(lock_, std::try_to_lock);
                    if (!g.owns_lock()) return r.ns;
                    if (still(r.gen)) advance(src, false);
                    continue;
                }
                // No value: past the end (nobody read the clock in the lead) or behind the
                // start. Wait for the next line, or compute it.
                std::lock_guard g(lock_);
                if (still(r.gen)) advance(src, r.what == reading::behind);
                continue;
            }
            case on_reference:
                return from_reference(src.reference());
            case calibrating: {
                const std::int64_t ref = src.reference();
                if (span_between(calib_start_ns_.load(std::memory_order_acquire), ref) >= calibration_ns) {
                    std::unique_lock g(lock_, std::try_to_lock);
                    if (g.owns_lock() && mode_.load(std::memory_order_relaxed) == calibrating) calibrate(src);
                }
                return ref;
            }
            default: {
                std::lock_guard g(lock_);
                decide_locked(src);
                continue;
            }
            }
        }
    }

    /// What read() found.
    struct reading {
        enum kind { value, due, behind, beyond } what;
        std::int64_t ns;    // value, due: the reading
        std::uint64_t gen;  // the line it was read from
    };

    /// The line in use (or, just before its start, the previous one) at counter(): a
    /// value, a value with the next line due, or none (the counter behind the line's start
    /// or past its end). Lock-free.
    template <class Counter>
    reading read(Counter&& counter) const noexcept
    {
        for (;;) {
            const snapshot s = load<true>(counter);
            if (!s.consistent)
                continue;   // rewritten under us (we were held up for three lines)
            const std::uint64_t d = s.t - s.tsc0;
            if (d < s.span) return {reading::value, s.ns0 + tsc_scale(d, s.mult), s.gen};
            if (d < s.hard) return {reading::due, s.ns0 + tsc_scale(d, s.mult), s.gen};
            if (static_cast<std::int64_t>(d) >= 0) return {reading::beyond, 0, s.gen};
            // Before the start: a line is published up to its lead ahead of its start, so
            // a reader can meet it with a counter a little below; the previous line serves
            // those, exactly as its own readers did. Further behind: the counter went back.
            const std::uint64_t back = s.tsc0 - s.t;
            if (back <= 2 * (s.hard - s.span) && static_cast<std::int64_t>(s.t - s.prev_tsc0) >= 0)
                return {reading::value, s.prev_ns0 + tsc_scale(s.t - s.prev_tsc0, s.prev_mult), s.gen};
            return {reading::behind, 0, s.gen};
        }
    }

private:
    struct alignas(64) line {
        std::atomic<std::uint64_t> gen{0};        // generation this slot holds (0: being written)
        std::atomic<std::uint64_t> tsc0{0};       // counter value where the line starts
        std::atomic<std::uint64_t> span{0};       // readers serve [tsc0, tsc0 + span) lock-free
        std::atomic<std::int64_t> ns0{0};         // nanoseconds at tsc0
        std::atomic<std::uint64_t> mult{0};       // ns per tick, 32.32 fixed point
        std::atomic<std::uint64_t> hard{0};       // the line ends at tsc0 + hard (the lead: hard - span)
        std::atomic<std::uint64_t> prev_tsc0{0};  // the previous line, for counter values a
        std::atomic<std::int64_t> prev_ns0{0};    // little below tsc0 (a reader that meets
        std::atomic<std::uint64_t> prev_mult{0};  // this line before its start)
    };

    // One read of the line in use and of counter(), as a seqlock reader does it: the
    // generation, the fields, the counter, then the line's own generation again
    // (`consistent`: the line was not rewritten meanwhile). `Full`: also the end and the
    // previous line, which only the slow path reads (the hot path loads four fields).
    struct snapshot {
        std::uint64_t gen, tsc0, span, mult, t;
        std::int64_t ns0;
        std::uint64_t hard, prev_tsc0, prev_mult;
        std::int64_t prev_ns0;
        bool consistent;
    };

    template <bool Full, class Counter>
    [[gnu::always_inline]] snapshot load(Counter&& counter) const noexcept
    {
        snapshot s{};
        s.gen = current_.load(std::memory_order_acquire);
        const line& l = lines_[s.gen & 3];
        s.tsc0 = l.tsc0.load(std::memory_order_acquire);
        s.span = l.span.load(std::memory_order_acquire);
        if constexpr (Full) s.hard = l.hard.load(std::memory_order_acquire);
        s.ns0 = l.ns0.load(std::memory_order_acquire);
        s.mult = l.mult.load(std::memory_order_acquire);
        if constexpr (Full) {
            s.prev_tsc0 = l.prev_tsc0.load(std::memory_order_acquire);
            s.prev_ns0 = l.prev_ns0.load(std::memory_order_acquire);
            s.prev_mult = l.prev_mult.load(std::memory_order_acquire);
        }
        s.t = counter();
        s.consistent = l.gen.load(std::memory_order_relaxed) == s.gen;
        return s;
    }

    // A line as the writer knows it.
    struct line_values {
        std::uint64_t tsc0 = 0, span = 0, hard = 0, mult = 0;
        std::int64_t ns0 = 0;
        std::int64_t end() const noexcept { return ns0 + tsc_scale(hard, mult); }
    };

    // What only the writer touches, under lock_.
    struct writer_state {
        tsc_sample base{};        // the rate is measured from here...
        tsc_sample next_base{};   // ...which moves here every rebase_ns
        tsc_sample last{};        // the sample behind the line in use
        double rate = 0;          // ns per tick
        double period = 0;        // period_ns in ticks
        double lead = 0;          // lead_ns in ticks
        std::int64_t last_check_ns = 0;
        std::int64_t anomaly_since_ns = 0;
        int anomalies = 0;
        bool suspect = false;     // the line in use was started at an anomaly
    };

    static constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();

    // b - a, saturated (the reference's readings are close together, a test's need not be).
    static std::int64_t span_between(std::int64_t a, std::int64_t b) noexcept
    {
        std::int64_t d;
        if (__builtin_sub_overflow(b, a, &d)) return b > a ? i64_max : std::numeric_limits<std::int64_t>::min();
        return d;
    }

    static std::int64_t to_ns(double v) noexcept
    {
        constexpr double two_63 = 9223372036854775808.0;
        if (!(v < two_63)) return i64_max;
        if (!(v >= -two_63)) return std::numeric_limits<std::int64_t>::min();
        return static_cast<std::int64_t>(std::floor(v));
    }

    static std::uint64_t to_mult(double ns_per_tick) noexcept
    {
        return static_cast<std::uint64_t>(std::llround(ns_per_tick * 4294967296.0));
    }

    static std::uint64_t ticks(double n) noexcept
    {
        return n < 1 ? 1 : n > 4e18 ? std::uint64_t{4'000'000'000'000'000'000u} : static_cast<std::uint64_t>(n);
    }

    bool still(std::uint64_t gen) const noexcept
    {
        return current_.load(std::memory_order_relaxed) == gen && mode_.load(std::memory_order_relaxed) == on_counter;
    }

    line_values current_line() const noexcept
    {
        const line& l = lines_[current_.load(std::memory_order_relaxed) & 3];
        line_values v;
        v.tsc0 = l.tsc0.load(std::memory_order_relaxed);
        v.span = l.span.load(std::memory_order_relaxed);
        v.hard = l.hard.load(std::memory_order_relaxed);
        v.mult = l.mult.load(std::memory_order_relaxed);
        v.ns0 = l.ns0.load(std::memory_order_relaxed);
        return v;
    }

    template <class Source>
    void decide_locked(Source& src) noexcept
    {
        if (mode_.load(std::memory_order_relaxed) != undecided) return;
        if (!src.counter_allowed() || !src.kernel_uses_counter()) {
            mode_.store(on_reference, std::memory_order_release);
            return;
        }
        w_.base = w_.last = src.sample();
        w_.last_check_ns = w_.anomaly_since_ns = w_.base.ns;
        calib_start_ns_.store(w_.base.ns, std::memory_order_relaxed);
        mode_.store(calibrating, std::memory_order_release);
    }

    // Under lock_, mode calibrating, at least calibration_ns after the first sample.
    template <class Source>
    void calibrate(Source& src) noexcept
    {
        const tsc_sample a = w_.base;
        const tsc_sample b = src.sample();
        const std::int64_t dn = span_between(a.ns, b.ns);
        const std::uint64_t dc = b.counter - a.counter;
        if (dc == 0) {
            // A counter that does not move is no clock.
            mode_.store(on_reference, std::memory_order_release);
            return;
        }
        if (static_cast<std::int64_t>(dc) < 0 || dn <= 0) {
            // The counter went back meanwhile: measure again from here.
            w_.base = w_.last = b;
            calib_start_ns_.store(b.ns, std::memory_order_release);
            return;
        }
        const double rate = static_cast<double>(dn) / static_cast<double>(dc);
        if (!(rate > 0.01 && rate < 100)) {
            // 10 MHz .. 100 GHz, or not a clock to trust.
            mode_.store(on_reference, std::memory_order_release);
            return;
        }
        set_rate(rate);
        w_.next_base = w_.last = b;
        const std::int64_t margin = switch_margin_ns + to_ns(static_cast<double>(b.width) * rate);
        std::int64_t ns0;
        if (__builtin_add_overflow(b.ns, margin, &ns0)) ns0 = i64_max;
        const std::uint64_t hard = ticks(w_.period);
        const std::uint64_t window = ticks(w_.lead) * 2;
        publish(1, b.counter, hard, ns0, to_mult(rate), b.counter - window, ns0, 0);
        mode_.store(on_counter, std::memory_order_release);
    }

    void set_rate(double rate) noexcept
    {
        w_.rate = rate;
        w_.period = static_cast<double>(period_ns) / rate;
        w_.lead = static_cast<double>(lead_ns) / rate;
    }

    // Whether the counter advanced as the reference did from `a` to `b` (at w_.rate).
    bool consistent(const tsc_sample& a, const tsc_sample& b) const noexcept
    {
        const std::int64_t dn = span_between(a.ns, b.ns);
        const std::uint64_t dc = b.counter - a.counter;
        if (dn < 0 || static_cast<std::int64_t>(dc) <= 0) return false;
        const double expect = static_cast<double>(dc) * w_.rate;
        const double tol = rel_tol * static_cast<double>(dn) + static_cast<double>(tolerance_ns) +
                           static_cast<double>(a.width + b.width) * w_.rate;
        return std::abs(expect - static_cast<double>(dn)) <= tol;
    }

    // Under lock_, mode on_counter: the line in use was found due, past its end, or (when
    // `behind`) ahead of the counter. Publishes the next line, or falls back.
    template <class Source>
    void advance(Source& src, bool behind) noexcept
    {
        const line_values cur = current_line();
        const tsc_sample s = src.sample();
        const bool anomaly = behind || !consistent(w_.last, s);
        if (anomaly || span_between(w_.last_check_ns, s.ns) >= check_interval_ns) {
            w_.last_check_ns = s.ns;
            if (!src.kernel_uses_counter()) return fall_back(cur, s);
        }
        if (!anomaly) {
            w_.suspect = false;
            const std::int64_t dn = span_between(w_.base.ns, s.ns);
            const std::uint64_t dc = s.counter - w_.base.counter;
            if (static_cast<std::int64_t>(dc) > 0 && static_cast<double>(dc) >= w_.period && dn > 0)
                w_.rate = static_cast<double>(dn) / static_cast<double>(dc);
            if (span_between(w_.next_base.ns, s.ns) >= rebase_ns) {
                w_.base = w_.next_base;
                w_.next_base = s;
            }
            next_line(cur, s);
            w_.last = s;
            return;
        }
        if (span_between(w_.anomaly_since_ns, s.ns) >= anomaly_window_ns || span_between(w_.anomaly_since_ns, s.ns) < 0) {
            w_.anomaly_since_ns = s.ns;
            w_.anomalies = 0;
        }
        if (++w_.anomalies > max_anomalies) return fall_back(cur, s);
        if (w_.suspect && !behind) {
            // The second in a row, over the clean span since the restart: the counter's
            // rate changed (a migration to another host, say).
            const std::int64_t dn = span_between(w_.last.ns, s.ns);
            const std::uint64_t dc = s.counter - w_.last.counter;
            const double rate = static_cast<double>(dn) / static_cast<double>(dc);
            if (dn > 0 && static_cast<std::int64_t>(dc) > 0 && rate > 0.01 && rate < 100) set_rate(rate);
        }
        w_.suspect = true;
        w_.base = w_.next_base = w_.last = s;
        restart(cur, s);
    }

    // The next line, where the line in use ends (at the same value or, behind the
    // reference, stepped forward), aiming at the reference one period later.
    void next_line(const line_values& cur, const tsc_sample& s) noexcept
    {
        const double rate = w_.rate;
        const std::uint64_t sw = cur.tsc0 + cur.hard;
        const std::int64_t end = cur.end();
        // The reference at the switch, extrapolated from the sample (the switch may be
        // past: nobody read the clock for a while).
        const double ref_at_sw =
            static_cast<double>(s.ns) + static_cast<double>(static_cast<std::int64_t>(sw - s.counter)) * rate;
        std::int64_t start = end;
        if (static_cast<double>(end) < ref_at_sw - static_cast<double>(step_ns)) start = std::max(end, to_ns(ref_at_sw));
        const std::uint64_t from = static_cast<std::int64_t>(s.counter - sw) > 0 ? s.counter : sw;
        const std::uint64_t target = from + ticks(w_.period);
        const double target_ns = static_cast<double>(s.ns) + static_cast<double>(target - s.counter) * rate;
        const bool ahead = static_cast<double>(start) > ref_at_sw + static_cast<double>(step_ns);
        const std::uint64_t mult = slope(start, target_ns, target - sw, ahead);
        publish(current_.load(std::memory_order_relaxed) + 1, sw, target - sw, start, mult, cur.tsc0, cur.ns0, cur.mult);
    }

    // A line from the sample itself, after an anomaly: never below what the line in use
    // can have served (its end: a reader past it waits for the next line), aiming at the
    // reference restart_ns later.
    void restart(const line_values& cur, const tsc_sample& s) noexcept
    {
        const std::int64_t start = std::max(s.ns, cur.end());
        const std::uint64_t hard = ticks(static_cast<double>(restart_ns) / w_.rate);
        const double target_ns = static_cast<double>(s.ns) + static_cast<double>(hard) * w_.rate;
        const bool ahead = span_between(s.ns, start) > step_ns;
        const std::uint64_t mult = slope(start, target_ns, hard, ahead);
        const std::uint64_t window = 2 * std::min(hard / 2, ticks(w_.lead));
        publish(current_.load(std::memory_order_relaxed) + 1, s.counter, hard, start, mult, s.counter - window, start, 0);
    }

    // The slope from `start` to `target_ns` over `over` ticks, within the slew limits.
    std::uint64_t slope(std::int64_t start, double target_ns, std::uint64_t over, bool ahead) const noexcept
    {
        double m = (target_ns - static_cast<double>(start)) / static_cast<double>(over);
        m = std::clamp(m, w_.rate * (1 - (ahead ? max_slow : max_slew)), w_.rate * (1 + max_slew));
        return to_mult(m);
    }

    // Under lock_: the counter no longer serves. The reference from now on, plus what
    // keeps it from going below the largest value served (the end of the line in use).
    void fall_back(const line_values& cur, const tsc_sample& s) noexcept
    {
        const std::int64_t end = cur.end();
        offset_.store(end > s.ns ? span_between(s.ns, end) : 0, std::memory_order_relaxed);
        mode_.store(on_reference, std::memory_order_release);
    }

    // Writes line `gen` (its end clamped to the int64 range: at the very end, a flat line).
    void publish(std::uint64_t gen, std::uint64_t tsc0, std::uint64_t hard, std::int64_t ns0, std::uint64_t mult,
                 std::uint64_t prev_tsc0, std::int64_t prev_ns0, std::uint64_t prev_mult) noexcept
    {
        __extension__ typedef unsigned __int128 u128;
        const std::uint64_t room = static_cast<std::uint64_t>(i64_max) - static_cast<std::uint64_t>(ns0);   // ns0 <= max
        if (mult != 0 && ((static_cast<u128>(hard) * mult) >> 32) > room) {
            const u128 most = (static_cast<u128>(room) << 32) / mult;
            hard = static_cast<std::uint64_t>(most);
            if (hard < 2) {
                // The end of the int64 range: time stays there.
                mult = 0;
                hard = std::uint64_t{1} << 62;
            }
        }
        const std::uint64_t lead = std::min(ticks(w_.lead), hard / 2);
        line& l = lines_[gen & 3];
        // A reader that loads (with acquire) any of the words stored (with release) below
        // also sees gen 0 or later when it checks gen, and retries: a sequence lock
        // without fences, which ThreadSanitizer models exactly.
        l.gen.store(0, std::memory_order_relaxed);
        l.tsc0.store(tsc0, std::memory_order_release);
        l.span.store(hard - lead, std::memory_order_release);
        l.hard.store(hard, std::memory_order_release);
        l.ns0.store(ns0, std::memory_order_release);
        l.mult.store(mult, std::memory_order_release);
        l.prev_tsc0.store(prev_tsc0, std::memory_order_release);
        l.prev_ns0.store(prev_ns0, std::memory_order_release);
        l.prev_mult.store(prev_mult, std::memory_order_release);
        l.gen.store(gen, std::memory_order_release);
        current_.store(gen, std::memory_order_release);
    }

    // Read on every call: the mode and the line in use.
    std::atomic<int> mode_{undecided};
    std::atomic<std::uint64_t> current_{0};
    std::atomic<std::int64_t> offset_{0};
    std::atomic<std::int64_t> calib_start_ns_{0};
    line lines_[4];
    // The writers'.
    alignas(64) std::mutex lock_;
    writer_state w_;
};

} // namespace sluice::detail
