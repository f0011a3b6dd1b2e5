// Command-line flags of the examples: `--name value` and `--switch`, read one at a time,
// with a clear "PROGRAM: ..." message for a missing or malformed value (an example must
// not silently clamp or guess).
#pragma once

#include <charconv>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace examples {

/// All of `s` as a number of type T; false if anything is left over or out of range.
template <class T>
bool parse_number(std::string_view s, T& out)
{
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && end == s.data() + s.size() && !s.empty();
}

class flag_reader {
public:
    flag_reader(const char* program, int argc, char** argv) : program_(program), argc_(argc), argv_(argv) {}

    /// Moves to the next argument; false after the last one.
    bool next()
    {
        if (++i_ >= argc_) return false;
        flag_ = argv_[i_];
        return true;
    }

    const std::string& flag() const noexcept { return flag_; }
    bool is(std::string_view name) const noexcept { return flag_ == name; }
    bool help() const noexcept { return is("--help") || is("-h"); }

    /// The flag's value, the next argument (consumed); nullopt, said on stderr, if none.
    std::optional<std::string> value()
    {
        if (i_ + 1 >= argc_) {
            std::fprintf(stderr, "%s: %s needs a value\n", program_, flag_.c_str());
            return std::nullopt;
        }
        return std::string(argv_[++i_]);
    }

    bool text(std::string& out)
    {
        auto v = value();
        if (v) out = std::move(*v);
        return v.has_value();
    }

    template <class T>
    bool number(T& out)
    {
        auto v = value();
        if (!v) return false;
        if (!parse_number(*v, out)) {
            std::fprintf(stderr, "%s: %s: '%s' is not a valid number\n", program_, flag_.c_str(), v->c_str());
            return false;
        }
        return true;
    }

    /// Says that the flag is unknown.
    void unknown() const { std::fprintf(stderr, "%s: unknown option '%s'\n", program_, flag_.c_str()); }

    /// Says that the value just read is not acceptable for the flag.
    void bad_value(std::string_view v) const
    {
        std::fprintf(stderr, "%s: bad value for %s: '%.*s'\n", program_, flag_.c_str(), static_cast<int>(v.size()),
                     v.data());
    }

private:
    const char* program_;
    int argc_;
    char** argv_;
    int i_ = 0;
    std::string flag_;
};

} // namespace examples
