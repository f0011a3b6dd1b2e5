// RFC 8941 section 4: parsing (4.2) and serialising (4.1) Lists.
#include <sluice/http/error.hpp>
#include <sluice/http/structured_field.hpp>

#include <cstddef>
#include <utility>

namespace sluice::http::sf {
namespace {

constexpr std::int64_t max_integer = 999'999'999'999'999;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_lcalpha(char c) { return c >= 'a' && c <= 'z'; }
bool is_alpha(char c) { return is_lcalpha(c) || (c >= 'A' && c <= 'Z'); }
bool is_tchar(char c)
{
    return is_alpha(c) || is_digit(c) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}
bool is_key_char(char c) { return is_lcalpha(c) || is_digit(c) || c == '_' || c == '-' || c == '.' || c == '*'; }

int base64_value(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (is_digit(c)) return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

class parser {
public:
    explicit parser(std::string_view s) : s_(s) {}

    bool parse(list& out)
    {
        for (char c : s_)
            if (static_cast<unsigned char>(c) > 0x7f) return false; // not ASCII
        skip_sp();
        // 4.2.1: members separated by "," with optional whitespace; no trailing comma.
        while (!at_end()) {
            member m;
            if (peek() == '(') {
                if (!inner_list(m)) return false;
            } else {
                if (!bare(m.value.value) || !params(m.value.params)) return false;
            }
            out.push_back(std::move(m));
            skip_ows();
            if (at_end()) break;
            if (next() != ',') return false;
            skip_ows();
            if (at_end()) return false;
        }
        skip_sp();
        return at_end();
    }

private:
    bool at_end() const { return i_ >= s_.size(); }
    char peek() const { return at_end() ? '\0' : s_[i_]; }
    char next() { return at_end() ? '\0' : s_[i_++]; }
    void skip_sp()
    {
        while (peek() == ' ') ++i_;
    }
    void skip_ows()
    {
        while (peek() == ' ' || peek() == '\t') ++i_;
    }

    bool inner_list(member& m)
    {
        ++i_; // '('
        m.inner_list = true;
        for (;;) {
            skip_sp();
            if (at_end()) return false;
            if (peek() == ')') {
                ++i_;
                return params(m.params);
            }
            item it;
            if (!bare(it.value) || !params(it.params)) return false;
            m.items.push_back(std::move(it));
            if (peek() != ' ' && peek() != ')') return false;
        }
    }

    bool params(parameters& out)
    {
        while (peek() == ';') {
            ++i_;
            skip_sp();
            std::string key;
            if (!is_lcalpha(peek()) && peek() != '*') return false;
            while (is_key_char(peek())) key.push_back(next());
            bare_item value; // no "=": Boolean true
            if (peek() == '=') {
                ++i_;
                if (!bare(value)) return false;
            }
            bool found = false;
            for (auto& p : out)
                if (p.key == key) {
                    p.value = std::move(value); // the last value, at the first position
                    found = true;
                    break;
                }
            if (!found) out.push_back(parameter{std::move(key), std::move(value)});
        }
        return true;
    }

    bool bare(bare_item& v)
    {
        char c = peek();
        if (c == '-' || is_digit(c)) return number(v);
        if (c == '"') return string(v);
        if (c == '*' || is_alpha(c)) return token(v);
        if (c == ':') return bytes(v);
        if (c == '?') return boolean(v);
        return false;
    }

    // 4.2.4
    bool number(bare_item& v)
    {
        bool negative = false;
        if (peek() == '-') {
            negative = true;
            ++i_;
        }
        if (!is_digit(peek())) return false;
        std::int64_t int_part = 0, frac = 0;
        int int_digits = 0, frac_digits = 0;
        bool decimal = false;
        while (!at_end()) {
            char c = peek();
            if (is_digit(c)) {
                if (decimal) {
                    if (++frac_digits > 3) return false;
                    frac = frac * 10 + (c - '0');
                } else {
                    if (++int_digits > 15) return false;
                    int_part = int_part * 10 + (c - '0');
                }
            } else if (!decimal && c == '.') {
                if (int_digits > 12) return false;
                decimal = true;
            } else {
                break;
            }
            ++i_;
        }
        if (!decimal) {
            v.type = bare_item::kind::integer;
            v.number = negative ? -int_part : int_part;
            return true;
        }
        if (frac_digits == 0) return false; // ends with "."
        while (frac_digits++ < 3) frac *= 10;
        v.type = bare_item::kind::decimal;
        v.number = (int_part * 1000 + frac) * (negative ? -1 : 1);
        return true;
    }

    // 4.2.5
    bool string(bare_item& v)
    {
        ++i_; // '"'
        v.type = bare_item::kind::string;
        while (!at_end()) {
            char c = next();
            if (c == '\\') {
                if (at_end()) return false;
                char e = next();
                if (e != '"' && e != '\\') return false;
                v.text.push_back(e);
            } else if (c == '"') {
                return true;
            } else if (c < 0x20 || c == 0x7f) {
                return false;
            } else {
                v.text.push_back(c);
            }
        }
        return false; // unterminated
    }

    // 4.2.6
    bool token(bare_item& v)
    {
        v.type = bare_item::kind::token;
        v.text.push_back(next());
        while (is_tchar(peek()) || peek() == ':' || peek() == '/') v.text.push_back(next());
        return true;
    }

    // 4.2.7: padding may be missing (parsers SHOULD NOT fail on it); non-zero pad bits are
    // dropped. A lone sixth bit group or "=" inside the data is not base64.
    bool bytes(bare_item& v)
    {
        ++i_; // ':'
        v.type = bare_item::kind::byte_sequence;
        std::size_t end = s_.find(':', i_);
        if (end == std::string_view::npos) return false;
        std::string_view b64 = s_.substr(i_, end - i_);
        i_ = end + 1;
        std::size_t data = b64.size();
        while (data > 0 && b64[data - 1] == '=') --data;
        if (b64.size() - data > 2) return false;
        if (b64.size() != data && b64.size() % 4 != 0) return false; // padding, but not to a multiple of 4
        if (data % 4 == 1) return false;
        std::uint32_t acc = 0;
        int bits = 0;
        for (std::size_t k = 0; k < data; ++k) {
            int d = base64_value(b64[k]);
            if (d < 0) return false;
            acc = (acc << 6) | static_cast<std::uint32_t>(d);
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                v.text.push_back(static_cast<char>((acc >> bits) & 0xff));
            }
        }
        return true;
    }

    // 4.2.8
    bool boolean(bare_item& v)
    {
        ++i_; // '?'
        v.type = bare_item::kind::boolean;
        char c = next();
        if (c != '0' && c != '1') return false;
        v.boolean = c == '1';
        return true;
    }

    std::string_view s_;
    std::size_t i_ = 0;
};

bool serialize_bare(const bare_item& v, std::string& out)
{
    switch (v.type) {
    case bare_item::kind::integer:
        if (v.number > max_integer || v.number < -max_integer) return false;
        out += std::to_string(v.number);
        return true;
    case bare_item::kind::decimal: {
        // Held exactly in thousandths: at most 12 integer digits, trailing zeros of the
        // fraction dropped but one digit kept.
        std::int64_t a = v.number < 0 ? -v.number : v.number;
        if (v.number < -999'999'999'999'999 || a / 1000 > 999'999'999'999) return false;
        if (v.number < 0) out.push_back('-');
        out += std::to_string(a / 1000);
        out.push_back('.');
        std::int64_t frac = a % 1000;
        char digits[3] = {static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                          static_cast<char>('0' + frac % 10)};
        int n = 3;
        while (n > 1 && digits[n - 1] == '0') --n;
        out.append(digits, static_cast<std::size_t>(n));
        return true;
    }
    case bare_item::kind::string:
        out.push_back('"');
        for (char c : v.text) {
            if (c < 0x20 || c > 0x7e) return false;
            if (c == '"' || c == '\\') out.push_back('\\');
            out.push_back(c);
        }
        out.push_back('"');
        return true;
    case bare_item::kind::token:
        if (v.text.empty() || !(is_alpha(v.text[0]) || v.text[0] == '*')) return false;
        for (char c : v.text)
            if (!is_tchar(c) && c != ':' && c != '/') return false;
        out += v.text;
        return true;
    case bare_item::kind::byte_sequence: {
        static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        out.push_back(':');
        std::size_t k = 0;
        const auto* b = reinterpret_cast<const unsigned char*>(v.text.data());
        for (; k + 3 <= v.text.size(); k += 3) {
            std::uint32_t n = (std::uint32_t{b[k]} << 16) | (std::uint32_t{b[k + 1]} << 8) | b[k + 2];
            for (int s = 18; s >= 0; s -= 6) out.push_back(alphabet[(n >> s) & 63]);
        }
        if (std::size_t rest = v.text.size() - k; rest > 0) {
            std::uint32_t n = std::uint32_t{b[k]} << 16;
            if (rest == 2) n |= std::uint32_t{b[k + 1]} << 8;
            out.push_back(alphabet[(n >> 18) & 63]);
            out.push_back(alphabet[(n >> 12) & 63]);
            out.push_back(rest == 2 ? alphabet[(n >> 6) & 63] : '=');
            out.push_back('=');
        }
        out.push_back(':');
        return true;
    }
    case bare_item::kind::boolean:
        out += v.boolean ? "?1" : "?0";
        return true;
    }
    return false;
}

bool serialize_params(const parameters& params, std::string& out)
{
    for (const auto& p : params) {
        if (p.key.empty() || !(is_lcalpha(p.key[0]) || p.key[0] == '*')) return false;
        for (char c : p.key)
            if (!is_key_char(c)) return false;
        out.push_back(';');
        out += p.key;
        if (p.value.type == bare_item::kind::boolean && p.value.boolean) continue;
        out.push_back('=');
        if (!serialize_bare(p.value, out)) return false;
    }
    return true;
}

} // namespace

boost::system::result<list> parse_list(std::string_view text)
{
    list out;
    if (!parser(text).parse(out)) return make_error_code(error::invalid_structured_field);
    return out;
}

boost::system::result<std::string> serialize_list(const list& l)
{
    std::string out;
    for (std::size_t k = 0; k < l.size(); ++k) {
        if (k > 0) out += ", ";
        const member& m = l[k];
        bool ok = true;
        if (m.inner_list) {
            out.push_back('(');
            for (std::size_t j = 0; j < m.items.size() && ok; ++j) {
                if (j > 0) out.push_back(' ');
                ok = serialize_bare(m.items[j].value, out) && serialize_params(m.items[j].params, out);
            }
            out.push_back(')');
            ok = ok && serialize_params(m.params, out);
        } else {
            ok = serialize_bare(m.value.value, out) && serialize_params(m.value.params, out);
        }
        if (!ok) return make_error_code(error::unserializable);
    }
    return out;
}

const bare_item* find(const parameters& params, std::string_view key) noexcept
{
    for (const auto& p : params)
        if (p.key == key) return &p.value;
    return nullptr;
}

} // namespace sluice::http::sf
