// What the fuzz targets share: the input read as a stream of choices, Redis replies built
// from it, and a check that stops the run with a message (libFuzzer then saves the input
// as crash-*). Each target checks the invariants of its machine, not only "no crash".
#pragma once

#include <sluice/redis/reply.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace fuzz {

[[noreturn]] inline void fail(const char* file, int line, const char* what)
{
    std::fprintf(stderr, "fuzz invariant broken: %s:%d: %s\n", file, line, what);
    std::abort();
}

#define FUZZ_CHECK(cond) ((cond) ? void(0) : ::fuzz::fail(__FILE__, __LINE__, #cond))

/// The input as a stream: every read takes bytes from the front and gives zeros once the
/// input is used up, so that any input is a complete run (a short one ends early).
class input {
public:
    input(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}

    bool empty() const noexcept { return p_ == end_; }
    std::size_t left() const noexcept { return static_cast<std::size_t>(end_ - p_); }

    std::uint8_t byte() noexcept { return p_ == end_ ? 0 : *p_++; }

    bool flag() noexcept { return byte() & 1; }

    /// sizeof(T) bytes, little-endian.
    template <class T>
    T integer() noexcept
    {
        using U = std::make_unsigned_t<T>;
        U v = 0;
        for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<U>(U(byte()) << (8 * i));
        return static_cast<T>(v);
    }

    /// A number of any size, most often a small one: a tag byte, then nothing (0 to 63),
    /// two bytes (times 1000: a few ms in us), four, or eight (any int64).
    std::int64_t number() noexcept
    {
        std::uint8_t b = byte();
        switch (b >> 6) {
        case 0: return b & 63;
        case 1: return std::int64_t{integer<std::uint16_t>()} * 1000;
        case 2: return integer<std::uint32_t>();
        default: return integer<std::int64_t>();
        }
    }

    /// A length byte, then that many bytes (fewer at the end of the input).
    std::string text()
    {
        std::size_t n = std::min<std::size_t>(byte(), left());
        std::string s(reinterpret_cast<const char*>(p_), n);
        p_ += n;
        return s;
    }

    /// Everything not read yet.
    std::string_view rest() noexcept
    {
        std::string_view s(reinterpret_cast<const char*>(p_), left());
        p_ = end_;
        return s;
    }

private:
    const std::uint8_t* p_;
    const std::uint8_t* end_;
};

using sluice::redis::reply;

/// A bulk string reply holding s.
inline reply text_reply(std::string s)
{
    reply r;
    r.type = reply::kind::string;
    r.str = std::move(s);
    return r;
}

/// A reply of any shape: the tag byte's low three bits choose nil, integer, bulk string,
/// status, error, array (up to 7 elements, 3 levels), or an array of six or nine integers
/// (the shape of a script's verdict, otherwise rare in random bytes).
inline reply any_reply(input& in, int depth = 0)
{
    reply r;
    switch (in.byte() & 7) {
    case 0: break;
    case 1:
        r.type = reply::kind::integer;
        r.integer = in.integer<std::int64_t>();
        break;
    case 2:
        r.type = reply::kind::string;
        r.str = in.text();
        break;
    case 3:
        r.type = reply::kind::status;
        r.str = in.text();
        break;
    case 4:
        r.type = reply::kind::error;
        r.str = in.text();
        break;
    case 5: {
        r.type = reply::kind::array;
        std::size_t n = in.byte() & 7;
        for (std::size_t i = 0; i < n; ++i) r.elements.push_back(depth < 3 ? any_reply(in, depth + 1) : reply{});
        break;
    }
    default: {
        r.type = reply::kind::array;
        std::size_t n = (in.byte() & 1) ? 9 : 6;
        for (std::size_t i = 0; i < n; ++i) {
            reply e;
            e.type = reply::kind::integer;
            e.integer = in.number();
            r.elements.push_back(e);
        }
        break;
    }
    }
    return r;
}

inline bool same(const reply& a, const reply& b)
{
    if (a.type != b.type || a.integer != b.integer || a.str != b.str || a.elements.size() != b.elements.size())
        return false;
    for (std::size_t i = 0; i < a.elements.size(); ++i)
        if (!same(a.elements[i], b.elements[i])) return false;
    return true;
}

} // namespace fuzz
