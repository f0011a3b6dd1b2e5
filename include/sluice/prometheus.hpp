// limiter_stats, and any other counter or gauge, in the two text formats every monitoring
// stack scrapes: the Prometheus text exposition format 0.0.4 and OpenMetrics 1.0. A writer
// appends to a std::string (no iostreams, no locale); names are checked, never fixed up.
//
//     std::string body;
//     sluice::prometheus::writer w(body);        // "sluice_" prefix, text format 0.0.4
//     const sluice::prometheus::named_stats limiters[] = {{"api", api.stats()}, {"db", db.stats()}};
//     sluice::prometheus::write_stats(w, limiters);
//     w.finish();
//
// gives, once per family whatever the number of limiters,
//
//     # HELP sluice_limiter_requests_total Requests that may wait (acquire), by outcome.
//     # TYPE sluice_limiter_requests_total counter
//     sluice_limiter_requests_total{limiter="api",outcome="admitted"} 12
//     ...
#pragma once

#include <sluice/limiter_stats.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::prometheus {

/// The text formats a scraper reads.
enum class format {
    /// The Prometheus text exposition format 0.0.4: a counter's HELP and TYPE name it with
    /// its `_total`.
    text,
    /// OpenMetrics 1.0: HELP, TYPE and UNIT name a counter's family without `_total`, its
    /// sample with it; the exposition ends with `# EOF` (writer::finish).
    openmetrics,
};

/// The Content-Type of an exposition in `f`:
/// `text/plain; version=0.0.4; charset=utf-8` or
/// `application/openmetrics-text; version=1.0.0; charset=utf-8`.
std::string_view content_type(format f) noexcept;

/// The format a scraper asks for in its Accept field: OpenMetrics when it names
/// `application/openmetrics-text` (with a q-value above 0), text otherwise, as Prometheus
/// itself falls back.
format negotiate(std::string_view accept) noexcept;

/// The types of metric family a writer writes.
enum class metric_type {
    counter,   ///< only goes up: samples named `<family>_total`
    gauge,     ///< goes up and down
    histogram, ///< `<family>_bucket` (writer::bucket), `<family>_sum`, `<family>_count`
};

/// A label of a sample: a name (`[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__`) and
/// any UTF-8 value (written escaped).
struct label {
    std::string_view name;  ///< the label's name
    std::string_view value; ///< its value
};

/// A sample's value: an integer, written exactly, or a floating-point number, written in
/// the shortest form that reads back the same (`NaN`, `+Inf`, `-Inf`). A duration is
/// written in seconds, as a double (the base unit of time in both formats).
class number {
public:
    /// An integer, written exactly (a bool as 0 or 1).
    template <std::integral T>
    number(T v) noexcept // NOLINT(google-explicit-constructor): values convert as they are written
    {
        if constexpr (std::is_signed_v<T>) {
            kind_ = v < 0 ? kind::negative : kind::unsigned_integer;
            u_ = v < 0 ? static_cast<std::uint64_t>(-(static_cast<std::int64_t>(v) + 1)) + 1
                       : static_cast<std::uint64_t>(v);
        } else {
            kind_ = kind::unsigned_integer;
            u_ = v;
        }
    }

    /// A floating-point value.
    template <std::floating_point T>
    number(T v) noexcept : kind_(kind::floating), d_(static_cast<double>(v)) // NOLINT(google-explicit-constructor)
    {
    }

    /// A duration, in seconds.
    template <class Rep, class Period>
    number(std::chrono::duration<Rep, Period> d) noexcept // NOLINT(google-explicit-constructor)
        : kind_(kind::floating), d_(std::chrono::duration<double>(d).count())
    {
    }

    /// Whether the value is below zero (NaN is not).
    bool negative() const noexcept { return kind_ == kind::negative || (kind_ == kind::floating && d_ < 0); }
    /// Whether the value is NaN.
    bool nan() const noexcept { return kind_ == kind::floating && d_ != d_; }
    /// Appends the value as the formats write it.
    void append_to(std::string& out) const;

private:
    enum class kind : unsigned char { unsigned_integer, negative, floating };
    kind kind_;
    std::uint64_t u_ = 0; // the magnitude of an integer
    double d_ = 0;
};

/// What a writer writes besides its families.
struct writer_options {
    /// The format (see negotiate and content_type).
    format exposition = format::text;
    /// Put before every family name: empty, or a metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
    std::string prefix = "sluice_";
    /// Labels added to every sample, first (`instance`-like labels a scraper cannot add:
    /// a worker's number, a service's name). Names as for label, each once.
    std::vector<std::pair<std::string, std::string>> constant_labels;
};

/// Appends an exposition to a string, family by family: family() writes a family's HELP
/// and TYPE (and UNIT, in OpenMetrics), sample() and bucket() its samples, finish() the
/// end. Each family name may be written once; every sample belongs to the last family.
///
/// Errors: a name or label that the formats cannot carry, a family written twice, a
/// sample outside its family's shape (a counter's negative or NaN value, a histogram's
/// `le` label) throw boost::system::system_error(sluice::error::invalid_option), and
/// nothing is fixed up silently. What was appended before the exception is left: discard
/// the string.
///
/// Thread-safety: none (one writer, one thread); the limiters' stats() may be taken from
/// any thread before.
class writer {
public:
    /// Appends to `out`, which must outlive the writer. Throws (invalid_option) for a bad
    /// prefix, a bad or repeated constant label name, a constant label value that is not
    /// UTF-8.
    explicit writer(std::string& out, writer_options options = {});

    /// Starts the family named prefix + `name`: its HELP (`help`, any UTF-8 text, written
    /// escaped) and TYPE, and in OpenMetrics its UNIT (`unit`, such as "seconds", empty for
    /// none; the name must then end in `_<unit>`, in both formats). A counter's name does
    /// not end in `_total`: the writer adds it to its samples (and to its HELP and TYPE in
    /// the text format).
    void family(std::string_view name, metric_type type, std::string_view help, std::string_view unit = {});

    /// A sample of the current counter or gauge, with the constant labels and `labels`.
    void sample(std::span<const label> labels, number value);
    /// sample() with labels written in place: `w.sample({{"outcome", "admitted"}}, n)`.
    void sample(std::initializer_list<label> labels, number value);
    /// A sample without labels of its own.
    void sample(number value);
    /// The `_sum` or `_count` sample of the current histogram (`part` names it).
    void sample(std::string_view part, std::span<const label> labels, number value);
    /// A `_bucket` sample of the current histogram: `count` observations at most `le`
    /// (+infinity for the last bucket, which every histogram needs).
    void bucket(std::span<const label> labels, double le, std::uint64_t count);

    /// Ends the exposition: `# EOF` in OpenMetrics, nothing in the text format. Nothing may
    /// be written after.
    void finish();

    /// The format it writes.
    format exposition() const noexcept { return format_; }

private:
    void start_sample(std::string_view suffix, std::span<const label> labels, const label* le);

    std::string& out_;
    format format_;
    std::string prefix_;
    std::vector<std::pair<std::string, std::string>> constant_;
    std::vector<std::string> families_; // names written, each once
    std::string family_;                // the current one (with the prefix)
    metric_type type_ = metric_type::gauge;
    bool in_family_ = false;
    bool finished_ = false;
};

/// The groups of limiter_stats, to write only those that apply to a limiter (those that do
/// not stay zero, and would say "0" of what the limiter does not count).
struct stats_groups {
    bool requests = true; ///< admitted to closed, waiting, waited, total_wait, longest_wait
    bool tries = true;    ///< try_admitted, try_refused (a local limiter counts them only when asked)
    bool keys = true;     ///< limiter_stats::keys (sluice::keyed)
    bool backend = true;  ///< limiter_stats::backend (the Redis limiters)
    bool adaptive = true; ///< limiter_stats::adaptive (adaptive_rate, adaptive_concurrency)
    bool shadow = true;   ///< limiter_stats::shadow, written only for a limiter in shadow mode
};

/// One limiter to write: its name, the value of its limiter label.
struct named_stats {
    std::string_view name;         ///< the limiter label's value
    limiter_stats stats;           ///< its counts (stats())
    stats_groups groups{};         ///< the groups to write
    std::span<const label> labels{}; ///< more labels of this limiter's samples
};

/// Writes every family of limiter_stats that at least one limiter's groups hold (see the
/// guide's table of names): HELP and TYPE once, then a sample per limiter, labelled
/// `label_name`="name" (and outcome="..." for the two families by outcome: requests and
/// tries). Counters end in `_total`, durations are in seconds, waiting, tracked keys and
/// degraded are gauges. Throws as writer (invalid_option): a bad label_name, a family of
/// these names already written, a label that is not UTF-8.
void write_stats(writer& w, std::span<const named_stats> limiters, std::string_view label_name = "limiter");

} // namespace sluice::prometheus
