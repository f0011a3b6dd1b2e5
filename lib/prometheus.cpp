// The Prometheus text format 0.0.4 (prometheus/docs, "Exposition formats") and OpenMetrics
// 1.0 (OpenMetrics specification, "Text format"): where they differ, in a counter's family
// name, HELP escaping, UNIT and the end.
#include <sluice/error.hpp>
#include <sluice/prometheus.hpp>

#include <boost/system/system_error.hpp>

#include <charconv>
#include <cmath>
#include <limits>

namespace sluice::prometheus {
namespace {

[[noreturn]] void bad() { throw boost::system::system_error(make_error_code(error::invalid_option)); }

void check(bool ok)
{
    if (!ok) bad();
}

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// [a-zA-Z_:][a-zA-Z0-9_:]*, or (a prefix) empty.
bool metric_name_chars(std::string_view s)
{
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (!(is_alpha(c) || c == '_' || c == ':' || (i > 0 && is_digit(c)))) return false;
    }
    return true;
}

// [a-zA-Z_][a-zA-Z0-9_]*; a leading "__" is reserved for Prometheus's own labels.
bool label_name_ok(std::string_view s)
{
    if (s.empty() || s.starts_with("__")) return false;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (!(is_alpha(c) || c == '_' || (i > 0 && is_digit(c)))) return false;
    }
    return true;
}

// Well-formed UTF-8 (RFC 3629: no overlong form, no surrogate, nothing past U+10FFFF): a
// scraper refuses the whole page for one bad byte.
bool utf8(std::string_view s)
{
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const auto* end = p + s.size();
    while (p < end) {
        const unsigned c = *p;
        if (c < 0x80) {
            ++p;
            continue;
        }
        std::size_t n;
        unsigned lo = 0x80, hi = 0xbf; // the range of the second byte
        if (c >= 0xc2 && c <= 0xdf) n = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            if (c == 0xe0) lo = 0xa0;
            if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            if (c == 0xf0) lo = 0x90;
            if (c == 0xf4) hi = 0x8f;
        } else {
            return false;
        }
        if (static_cast<std::size_t>(end - p) <= n) return false;
        if (p[1] < lo || p[1] > hi) return false;
        for (std::size_t k = 2; k <= n; ++k)
            if ((p[k] & 0xc0) != 0x80) return false;
        p += n + 1;
    }
    return true;
}

// A label value: backslash, double quote and line feed escaped, in both formats.
void append_label_value(std::string& out, std::string_view v)
{
    for (char c : v) {
        switch (c) {
        case '\\': out += "\\\\"; break;
        case '"': out += "\\\""; break;
        case '\n': out += "\\n"; break;
        default: out.push_back(c);
        }
    }
}

// HELP: backslash and line feed escaped; OpenMetrics escapes the double quote too.
void append_help(std::string& out, std::string_view v, format f)
{
    for (char c : v) {
        switch (c) {
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '"':
            if (f == format::openmetrics) out += "\\\"";
            else out.push_back(c);
            break;
        default: out.push_back(c);
        }
    }
}

template <class T>
void append_chars(std::string& out, T v)
{
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

void append_double(std::string& out, double d)
{
    if (std::isnan(d)) out += "NaN";
    else if (std::isinf(d)) out += d > 0 ? "+Inf" : "-Inf";
    else append_chars(out, d);
}

void append_label(std::string& out, bool& first, std::string_view name, std::string_view value)
{
    out.push_back(first ? '{' : ',');
    first = false;
    out += name;
    out += "=\"";
    append_label_value(out, value);
    out.push_back('"');
}

} // namespace

void number::append_to(std::string& out) const
{
    switch (kind_) {
    case kind::unsigned_integer: append_chars(out, u_); break;
    case kind::negative:
        out.push_back('-');
        append_chars(out, u_);
        break;
    case kind::floating: append_double(out, d_); break;
    }
}

std::string_view content_type(format f) noexcept
{
    return f == format::openmetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                    : "text/plain; version=0.0.4; charset=utf-8";
}

format negotiate(std::string_view accept) noexcept
{
    // Accept = #( media-range [ weight ] ): a media range of openmetrics whose q is not 0.
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    auto trim = [](std::string_view s) {
        while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
        while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
        return s;
    };
    auto equal = [&](std::string_view a, std::string_view b) {
        if (a.size() != b.size()) return false;
        for (std::size_t i = 0; i < a.size(); ++i)
            if (lower(a[i]) != lower(b[i])) return false;
        return true;
    };
    while (!accept.empty()) {
        const auto comma = accept.find(',');
        std::string_view range = accept.substr(0, comma);
        accept = comma == std::string_view::npos ? std::string_view{} : accept.substr(comma + 1);
        const auto semi = range.find(';');
        if (!equal(trim(range.substr(0, semi)), "application/openmetrics-text")) continue;
        bool refused = false;
        for (auto params = semi == std::string_view::npos ? std::string_view{} : range.substr(semi + 1);
             !params.empty();) {
            const auto next = params.find(';');
            const auto p = trim(params.substr(0, next));
            params = next == std::string_view::npos ? std::string_view{} : params.substr(next + 1);
            if (p.size() >= 2 && lower(p[0]) == 'q' && p[1] == '=') {
                // q=0, q=0.0, q=0.000: refused (RFC 9110 12.4.2)
                const auto v = p.substr(2);
                refused = !v.empty() && v.find_first_not_of("0.") == std::string_view::npos;
            }
        }
        if (!refused) return format::openmetrics;
    }
    return format::text;
}

writer::writer(std::string& out, writer_options options)
    : out_(out), format_(options.exposition), prefix_(std::move(options.prefix)),
      constant_(std::move(options.constant_labels))
{
    check(metric_name_chars(prefix_));
    for (std::size_t i = 0; i < constant_.size(); ++i) {
        check(label_name_ok(constant_[i].first) && utf8(constant_[i].second));
        for (std::size_t j = 0; j < i; ++j) check(constant_[j].first != constant_[i].first);
    }
}

void writer::family(std::string_view name, metric_type type, std::string_view help, std::string_view unit)
{
    check(!finished_);
    std::string full = prefix_;
    full += name;
    check(!full.empty() && metric_name_chars(full) && utf8(help));
    // A counter's samples add _total; a histogram's _bucket, _sum and _count; OpenMetrics
    // reserves _created and _info too: a name that ends so would read as another family's.
    for (std::string_view reserved : {"_total", "_bucket", "_sum", "_count", "_created", "_info"})
        check(!full.ends_with(reserved));
    if (!unit.empty()) {
        check(metric_name_chars(unit) && unit.find(':') == std::string_view::npos);
        check(full.size() > unit.size() + 1 && full.ends_with(unit) && full[full.size() - unit.size() - 1] == '_');
    }
    for (const auto& f : families_) check(f != full);
    families_.push_back(full);

    family_ = std::move(full);
    type_ = type;
    in_family_ = true;
    // The text format names a counter's family as its samples are named.
    const bool total = type == metric_type::counter && format_ == format::text;
    out_ += "# HELP ";
    out_ += family_;
    if (total) out_ += "_total";
    out_.push_back(' ');
    append_help(out_, help, format_);
    out_ += "\n# TYPE ";
    out_ += family_;
    if (total) out_ += "_total";
    switch (type) {
    case metric_type::counter: out_ += " counter\n"; break;
    case metric_type::gauge: out_ += " gauge\n"; break;
    case metric_type::histogram: out_ += " histogram\n"; break;
    }
    if (!unit.empty() && format_ == format::openmetrics) {
        out_ += "# UNIT ";
        out_ += family_;
        out_.push_back(' ');
        out_ += unit;
        out_.push_back('\n');
    }
}

void writer::start_sample(std::string_view suffix, std::span<const label> labels, const label* le)
{
    check(in_family_ && !finished_);
    for (std::size_t i = 0; i < labels.size(); ++i) {
        check(label_name_ok(labels[i].name) && utf8(labels[i].value));
        // A histogram's le is the writer's (bucket()); a name is given once per sample.
        check(!(type_ == metric_type::histogram && labels[i].name == "le"));
        for (std::size_t j = 0; j < i; ++j) check(labels[j].name != labels[i].name);
        for (const auto& c : constant_) check(c.first != labels[i].name);
    }
    out_ += family_;
    out_ += suffix;
    bool first = true;
    for (const auto& c : constant_) append_label(out_, first, c.first, c.second);
    for (const auto& l : labels) append_label(out_, first, l.name, l.value);
    if (le) append_label(out_, first, le->name, le->value);
    if (!first) out_.push_back('}');
    out_.push_back(' ');
}

void writer::sample(std::span<const label> labels, number value)
{
    check(in_family_ && type_ != metric_type::histogram);
    if (type_ == metric_type::counter) check(!value.negative() && !value.nan());
    start_sample(type_ == metric_type::counter ? "_total" : "", labels, nullptr);
    value.append_to(out_);
    out_.push_back('\n');
}

void writer::sample(std::initializer_list<label> labels, number value)
{
    sample(std::span<const label>(labels.begin(), labels.size()), value);
}

void writer::sample(number value) { sample(std::span<const label>{}, value); }

void writer::sample(std::string_view part, std::span<const label> labels, number value)
{
    check(in_family_ && type_ == metric_type::histogram && (part == "_sum" || part == "_count"));
    check(!value.negative() && !value.nan());
    start_sample(part, labels, nullptr);
    value.append_to(out_);
    out_.push_back('\n');
}

void writer::bucket(std::span<const label> labels, double le, std::uint64_t count)
{
    check(in_family_ && type_ == metric_type::histogram && !std::isnan(le));
    // OpenMetrics wants le canonical: a whole number with its ".0", as Python's and Go's
    // clients write it (1.0, not 1).
    std::string text;
    append_double(text, le);
    if (format_ == format::openmetrics && text.find_first_of(".eIn") == std::string::npos) text += ".0";
    const label l{"le", text};
    start_sample("_bucket", labels, &l);
    append_chars(out_, count);
    out_.push_back('\n');
}

void writer::finish()
{
    check(!finished_);
    finished_ = true;
    in_family_ = false;
    if (format_ == format::openmetrics) out_ += "# EOF\n";
}

namespace {

using getter = number (*)(const limiter_stats&);

// One family of limiter_stats: samples by outcome (a partition of one count) or one value.
struct stats_family {
    std::string_view name;
    metric_type type;
    std::string_view unit;
    std::string_view help;
    bool stats_groups::*group;
    // (outcome, value), or one ("", value); the rest null.
    std::pair<std::string_view, getter> values[5];
};

#define SLUICE_FIELD(expr) [](const limiter_stats& s) -> number { return s.expr; }

// The guide's table of names follows this one; a new field of limiter_stats gets a row.
const stats_family stats_families[] = {
    {"limiter_requests", metric_type::counter, "", "Requests that may wait (acquire), by outcome.",
     &stats_groups::requests,
     {{"admitted", SLUICE_FIELD(admitted)},
      {"refused", SLUICE_FIELD(refused)},
      {"timed_out", SLUICE_FIELD(timed_out)},
      {"cancelled", SLUICE_FIELD(cancelled)},
      {"closed", SLUICE_FIELD(closed)}}},
    {"limiter_waiting", metric_type::gauge, "", "Requests waiting now.", &stats_groups::requests,
     {{"", SLUICE_FIELD(waiting)}}},
    {"limiter_waited", metric_type::counter, "", "Admitted requests that had to wait.", &stats_groups::requests,
     {{"", SLUICE_FIELD(waited)}}},
    {"limiter_wait_seconds", metric_type::counter, "seconds", "Time admitted requests spent waiting, summed.",
     &stats_groups::requests, {{"", SLUICE_FIELD(total_wait)}}},
    {"limiter_longest_wait_seconds", metric_type::gauge, "seconds", "The longest time one admitted request waited.",
     &stats_groups::requests, {{"", SLUICE_FIELD(longest_wait)}}},
    {"limiter_try_acquire", metric_type::counter, "", "Tries (try_acquire), by outcome.", &stats_groups::tries,
     {{"admitted", SLUICE_FIELD(try_admitted)}, {"refused", SLUICE_FIELD(try_refused)}}},
    {"limiter_keys_tracked", metric_type::gauge, "", "Keys tracked now.", &stats_groups::keys,
     {{"", SLUICE_FIELD(keys.tracked)}}},
    {"limiter_keys_waiting", metric_type::gauge, "", "Keys with requests waiting now.", &stats_groups::keys,
     {{"", SLUICE_FIELD(keys.waiting)}}},
    {"limiter_key_creations", metric_type::counter, "", "Keys created.", &stats_groups::keys,
     {{"", SLUICE_FIELD(keys.created)}}},
    {"limiter_key_evictions", metric_type::counter, "", "Idle keys evicted.", &stats_groups::keys,
     {{"", SLUICE_FIELD(keys.evicted)}}},
    {"limiter_overflow_requests", metric_type::counter, "",
     "Requests and tries for keys that could not be tracked, served by the overflow limiter.", &stats_groups::keys,
     {{"", SLUICE_FIELD(keys.overflow_requests)}}},
    {"limiter_overflow_admitted", metric_type::counter, "", "Of the overflow requests, those admitted.",
     &stats_groups::keys, {{"", SLUICE_FIELD(keys.overflow_admitted)}}},
    {"limiter_backend_commands", metric_type::counter, "", "Commands sent to the shared backend.",
     &stats_groups::backend, {{"", SLUICE_FIELD(backend.commands)}}},
    {"limiter_backend_errors", metric_type::counter, "", "Commands to the shared backend that failed.",
     &stats_groups::backend, {{"", SLUICE_FIELD(backend.errors)}}},
    {"limiter_backend_fallback_decisions", metric_type::counter, "",
     "Requests and tries answered by the failure policy while the backend was away.", &stats_groups::backend,
     {{"", SLUICE_FIELD(backend.fallback_decisions)}}},
    {"limiter_backend_leases_expired", metric_type::counter, "", "Leased slots dropped unused.",
     &stats_groups::backend, {{"", SLUICE_FIELD(backend.lease_expired)}}},
    {"limiter_backend_links_lost", metric_type::counter, "", "Links to the backend that were up and went.",
     &stats_groups::backend, {{"", SLUICE_FIELD(backend.links_lost)}}},
    {"limiter_backend_master_switches", metric_type::counter, "", "Failovers followed on a Sentinel's announcement.",
     &stats_groups::backend, {{"", SLUICE_FIELD(backend.master_switches)}}},
    {"limiter_backend_round_trip_seconds", metric_type::gauge, "seconds", "The round trip of the last reply.",
     &stats_groups::backend, {{"", SLUICE_FIELD(backend.last_round_trip)}}},
    {"limiter_backend_clock_offset_seconds", metric_type::gauge, "seconds",
     "The backend's clock minus this host's, from the last reply.", &stats_groups::backend,
     {{"", SLUICE_FIELD(backend.clock_offset)}}},
    {"limiter_backend_degraded", metric_type::gauge, "", "1 while requests go to the failure policy.",
     &stats_groups::backend, {{"", SLUICE_FIELD(backend.degraded)}}},
    {"limiter_adaptive_samples", metric_type::counter, "", "Completed operations fed to the controller.",
     &stats_groups::adaptive, {{"", SLUICE_FIELD(adaptive.samples)}}},
    {"limiter_adaptive_dropped", metric_type::counter, "", "Of the samples, those that failed from overload.",
     &stats_groups::adaptive, {{"", SLUICE_FIELD(adaptive.dropped)}}},
    {"limiter_adaptive_increases", metric_type::counter, "", "Times the limit went up.", &stats_groups::adaptive,
     {{"", SLUICE_FIELD(adaptive.increases)}}},
    {"limiter_adaptive_decreases", metric_type::counter, "", "Times the limit went down or the rate was cut.",
     &stats_groups::adaptive, {{"", SLUICE_FIELD(adaptive.decreases)}}},
    {"limiter_adaptive_adaptations", metric_type::counter, "", "Times the rate in force moved.",
     &stats_groups::adaptive, {{"", SLUICE_FIELD(adaptive.adaptations)}}},
    {"limiter_adaptive_responses", metric_type::counter, "", "Server responses fed.", &stats_groups::adaptive,
     {{"", SLUICE_FIELD(adaptive.responses)}}},
    {"limiter_adaptive_refusals", metric_type::counter, "", "Of the responses, refusals (429 or 503).",
     &stats_groups::adaptive, {{"", SLUICE_FIELD(adaptive.refusals)}}},
    {"limiter_adaptive_responses_with_fields", metric_type::counter, "",
     "Responses whose RateLimit fields set the rate.", &stats_groups::adaptive,
     {{"", SLUICE_FIELD(adaptive.with_fields)}}},
    {"limiter_adaptive_malformed_fields", metric_type::counter, "", "Response fields ignored as malformed.",
     &stats_groups::adaptive, {{"", SLUICE_FIELD(adaptive.malformed_fields)}}},
    {"limiter_adaptive_pauses", metric_type::counter, "", "Pauses started or extended.", &stats_groups::adaptive,
     {{"", SLUICE_FIELD(adaptive.pauses)}}},
    {"limiter_adaptive_pauses_cut", metric_type::counter, "", "Pauses cut to the longest allowed.",
     &stats_groups::adaptive, {{"", SLUICE_FIELD(adaptive.pauses_cut)}}},
    {"limiter_adaptive_distrusted", metric_type::counter, "",
     "Times a server's fields contradicted its refusals and were distrusted.", &stats_groups::adaptive,
     {{"", SLUICE_FIELD(adaptive.distrusted)}}},
    {"limiter_shadow_try_refused", metric_type::counter, "", "Shadow mode: tries the limit refused, admitted.",
     &stats_groups::shadow, {{"", SLUICE_FIELD(shadow.try_refused)}}},
    {"limiter_shadow_refused", metric_type::counter, "",
     "Shadow mode: acquires the limit would have refused, admitted.", &stats_groups::shadow,
     {{"", SLUICE_FIELD(shadow.refused)}}},
    {"limiter_shadow_waited", metric_type::counter, "",
     "Shadow mode: acquires that would have waited, admitted at once.", &stats_groups::shadow,
     {{"", SLUICE_FIELD(shadow.waited)}}},
    {"limiter_shadow_wait_seconds", metric_type::counter, "seconds",
     "Shadow mode: how long those acquires would have waited, summed.", &stats_groups::shadow,
     {{"", SLUICE_FIELD(shadow.total_wait)}}},
    {"limiter_shadow_longest_wait_seconds", metric_type::gauge, "seconds",
     "Shadow mode: the longest wait one acquire would have had.", &stats_groups::shadow,
     {{"", SLUICE_FIELD(shadow.longest_wait)}}},
};

// Whether limiter `l` writes family `f`: its group is on (the shadow group only for a
// limiter in shadow mode, whose counts would say nothing elsewhere).
bool writes(const named_stats& l, const stats_family& f) noexcept
{
    return l.groups.*f.group && (f.group != &stats_groups::shadow || l.stats.shadow.enabled);
}

#undef SLUICE_FIELD

} // namespace

void write_stats(writer& w, std::span<const named_stats> limiters, std::string_view label_name)
{
    check(label_name_ok(label_name));
    std::vector<label> labels;
    for (const auto& f : stats_families) {
        bool any = false;
        for (const auto& l : limiters) any = any || writes(l, f);
        if (!any) continue;
        w.family(f.name, f.type, f.help, f.unit);
        for (const auto& l : limiters) {
            if (!writes(l, f)) continue;
            for (const auto& [outcome, value] : f.values) {
                if (!value) break;
                labels.assign({label{label_name, l.name}});
                labels.insert(labels.end(), l.labels.begin(), l.labels.end());
                if (!outcome.empty()) labels.push_back({"outcome", outcome});
                w.sample(labels, value(l.stats));
            }
        }
    }
}

} // namespace sluice::prometheus
