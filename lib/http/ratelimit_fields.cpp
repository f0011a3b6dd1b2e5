#include <sluice/http/ratelimit_fields.hpp>

#include <initializer_list>
#include <utility>

namespace sluice::http {
namespace {

constexpr std::uint64_t max_integer = 999'999'999'999'999;

using sf::bare_item;

boost::system::error_code name_of(const sf::member& m, std::string& name)
{
    if (m.inner_list || m.value.value.type != bare_item::kind::string) return error::invalid_member;
    name = m.value.value.text;
    return {};
}

bool as_uint(const bare_item& v, std::uint64_t& out)
{
    if (v.type != bare_item::kind::integer || v.number < 0) return false;
    out = static_cast<std::uint64_t>(v.number);
    return true;
}

bare_item integer(std::uint64_t v)
{
    bare_item b;
    b.type = bare_item::kind::integer;
    b.number = static_cast<std::int64_t>(v);
    return b;
}

bare_item text(bare_item::kind k, std::string v)
{
    bare_item b;
    b.type = k;
    b.text = std::move(v);
    return b;
}

// Walks the parameters of one member: `known(key, value)` returns an error for a defined
// parameter it rejects, false for one it does not define (kept as an extension).
template <class Known>
boost::system::error_code split(const sf::parameters& params, sf::parameters& extensions, Known known)
{
    for (const auto& p : params) {
        boost::system::error_code ec;
        if (!known(p.key, p.value, ec)) extensions.push_back(p);
        if (ec) return ec;
    }
    return {};
}

// The members of a RateLimit list field: each a T named by its String value, whose
// parameters `known(t, key, value, bad)` takes (false for one it does not define, kept as
// an extension); `required` must be among them.
template <class T, class Known>
boost::system::result<std::vector<T>> parse(std::string_view field, std::string_view required, Known known)
{
    auto l = sf::parse_list(field);
    if (!l) return l.error();
    std::vector<T> out;
    out.reserve(l->size());
    for (const auto& m : *l) {
        T t;
        if (auto ec = name_of(m, t.name)) return ec;
        bool has_required = false;
        auto ec = split(m.value.params, t.extensions,
                        [&](const std::string& key, const bare_item& v, boost::system::error_code& bad) {
                            has_required = has_required || key == required;
                            return known(t, key, v, bad);
                        });
        if (ec) return ec;
        if (!has_required) return make_error_code(error::missing_parameter);
        out.push_back(std::move(t));
    }
    return out;
}

// `reserved`: the keys the draft defines for this field, which an extension must not
// repeat (the parser would merge them).
template <class T, class Build>
boost::system::result<std::string> format(std::span<const T> members, std::initializer_list<std::string_view> reserved,
                                          Build build)
{
    sf::list l;
    l.reserve(members.size());
    for (const auto& m : members) {
        sf::member out;
        out.value.value = text(bare_item::kind::string, m.name);
        if (auto ec = build(m, out.value.params)) return ec;
        for (const auto& e : m.extensions) {
            for (auto r : reserved)
                if (e.key == r) return make_error_code(error::invalid_parameter);
            if (sf::find(out.value.params, e.key)) return make_error_code(error::invalid_parameter);
            out.value.params.push_back(e);
        }
        l.push_back(std::move(out));
    }
    return sf::serialize_list(l);
}

} // namespace

boost::system::result<std::vector<quota_policy>> parse_ratelimit_policy(std::string_view field)
{
    return parse<quota_policy>(field, "q", [](quota_policy& p, const std::string& key, const bare_item& v, boost::system::error_code& bad) {
        if (key == "q") {
            if (!as_uint(v, p.quota)) bad = error::invalid_parameter;
        } else if (key == "w") {
            std::uint64_t w = 0;
            if (!as_uint(v, w) || w == 0) bad = error::invalid_parameter;
            p.window = w;
        } else if (key == "qu") {
            if (v.type != bare_item::kind::string) bad = error::invalid_parameter;
            p.quota_unit = v.text;
        } else if (key == "pk") {
            if (v.type != bare_item::kind::byte_sequence) bad = error::invalid_parameter;
            p.partition_key = v.text;
        } else {
            return false;
        }
        return true;
    });
}

boost::system::result<std::vector<service_limit>> parse_ratelimit(std::string_view field)
{
    return parse<service_limit>(field, "r", [](service_limit& s, const std::string& key, const bare_item& v, boost::system::error_code& bad) {
        if (key == "r") {
            if (!as_uint(v, s.remaining)) bad = error::invalid_parameter;
        } else if (key == "t") {
            std::uint64_t t = 0;
            if (!as_uint(v, t)) bad = error::invalid_parameter;
            s.reset = t;
        } else if (key == "pk") {
            if (v.type != bare_item::kind::byte_sequence) bad = error::invalid_parameter;
            s.partition_key = v.text;
        } else {
            return false;
        }
        return true;
    });
}

boost::system::result<std::string> format_ratelimit_policy(std::span<const quota_policy> policies)
{
    return format(policies, {"q", "qu", "w", "pk"}, [](const quota_policy& p, sf::parameters& params) -> boost::system::error_code {
        if (p.quota > max_integer || (p.window && *p.window > max_integer)) return error::unserializable;
        if (p.window && *p.window == 0) return error::invalid_parameter;
        params.push_back({"q", integer(p.quota)});
        if (p.quota_unit) params.push_back({"qu", text(bare_item::kind::string, *p.quota_unit)});
        if (p.window) params.push_back({"w", integer(*p.window)});
        if (p.partition_key) params.push_back({"pk", text(bare_item::kind::byte_sequence, *p.partition_key)});
        return {};
    });
}

boost::system::result<std::string> format_ratelimit(std::span<const service_limit> limits)
{
    return format(limits, {"r", "t", "pk"}, [](const service_limit& s, sf::parameters& params) -> boost::system::error_code {
        if (s.remaining > max_integer || (s.reset && *s.reset > max_integer)) return error::unserializable;
        params.push_back({"r", integer(s.remaining)});
        if (s.reset) params.push_back({"t", integer(*s.reset)});
        if (s.partition_key) params.push_back({"pk", text(bare_item::kind::byte_sequence, *s.partition_key)});
        return {};
    });
}

std::optional<std::uint64_t> uint_extension(const sf::parameters& extensions, std::string_view key) noexcept
{
    const bare_item* v = sf::find(extensions, key);
    std::uint64_t out = 0;
    if (v == nullptr || !as_uint(*v, out)) return std::nullopt;
    return out;
}

} // namespace sluice::http
