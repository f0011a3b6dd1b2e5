// How a keyed limiter stores its keys: short strings inline, 128-bit integers as two words,
// everything else as the Key itself.
#pragma once

#include <sluice/detail/base/arith.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace sluice::detail {

/// A string in 16 bytes: up to 15 characters inline, the last byte their count; longer
/// ones in a heap block (its size, then the characters) that the first 8 bytes point to.
/// Most keys of rate limiters are short (IPv4 addresses, host names, user ids), and a
/// std::string is 32 bytes before its first character: inline, a key and its limiter's
/// state fit in 24 bytes, and its characters are read with the same cache line.
class inline_string {
public:
    static constexpr std::size_t inline_max = 15;

    inline_string() noexcept { buf_[inline_max] = 0; }

    explicit inline_string(std::string_view s) { assign(s); }

    inline_string(const inline_string& o) { assign(o.view()); }

    inline_string(inline_string&& o) noexcept
    {
        std::memcpy(buf_, o.buf_, sizeof buf_);
        o.buf_[inline_max] = 0;   // the heap block, if any, is ours now
    }

    inline_string& operator=(inline_string o) noexcept
    {
        std::swap(buf_, o.buf_);
        return *this;
    }

    ~inline_string()
    {
        if (on_heap()) delete[] heap();
    }

    std::string_view view() const noexcept
    {
        if (!on_heap()) return {buf_, static_cast<std::size_t>(buf_[inline_max])};
        const char* h = heap();
        std::size_t n;
        std::memcpy(&n, h, sizeof n);
        return {h + sizeof n, n};
    }

    bool on_heap() const noexcept { return static_cast<unsigned char>(buf_[inline_max]) == heap_tag; }

private:
    static constexpr unsigned char heap_tag = 0xFF;

    void assign(std::string_view s)
    {
        if (s.size() <= inline_max) {
            std::memcpy(buf_, s.data(), s.size());
            buf_[inline_max] = static_cast<char>(s.size());
            return;
        }
        std::size_t n = s.size();
        char* h = new char[sizeof n + n];
        std::memcpy(h, &n, sizeof n);
        std::memcpy(h + sizeof n, s.data(), n);
        std::memcpy(buf_, &h, sizeof h);
        buf_[inline_max] = static_cast<char>(heap_tag);
    }

    char* heap() const noexcept
    {
        char* h;
        std::memcpy(&h, buf_, sizeof h);
        return h;
    }

    alignas(8) char buf_[16];
};

/// An unsigned 128-bit integer in two 8-byte words: alignof(unsigned __int128) is 16, which
/// would pad a key and its 8-byte state to 32 bytes.
struct split_uint128 {
    std::uint64_t lo = 0, hi = 0;

    split_uint128() = default;
    explicit split_uint128(uint128 v) noexcept
        : lo(static_cast<std::uint64_t>(v)), hi(static_cast<std::uint64_t>(v >> 64))
    {
    }
    uint128 value() const noexcept { return (uint128(hi) << 64) | lo; }
};

/// The stored form of Key and back: `type` is what the store holds, view(s) what Hash and
/// KeyEqual are given for it (the Key itself, or a view of the same value).
template <class Key>
struct key_storage {
    using type = Key;
    template <class K>
    static type make(const K& k)
    {
        return type(k);
    }
    static const Key& view(const type& s) noexcept { return s; }
};

template <>
struct key_storage<std::string> {
    using type = inline_string;
    template <class K>
    static type make(const K& k)
    {
        return type(std::string_view(k));
    }
    static std::string_view view(const type& s) noexcept { return s.view(); }
};

template <>
struct key_storage<uint128> {
    using type = split_uint128;
    template <class K>
    static type make(const K& k)
    {
        return type(uint128(k));
    }
    static uint128 view(const type& s) noexcept { return s.value(); }
};

/// Hash and KeyEqual applied to a stored key: on its view when they take it (a
/// std::string_view for string keys, the default), else on a Key built from it.
template <class Key, class Hash>
std::size_t hash_stored(const Hash& h, const typename key_storage<Key>::type& s)
{
    using view_type = decltype(key_storage<Key>::view(s));
    if constexpr (std::is_invocable_v<const Hash&, view_type>)
        return h(key_storage<Key>::view(s));
    else
        return h(Key(key_storage<Key>::view(s)));
}

template <class Key, class KeyEqual, class K>
bool equal_stored(const KeyEqual& eq, const typename key_storage<Key>::type& s, const K& k)
{
    using view_type = decltype(key_storage<Key>::view(s));
    if constexpr (std::is_invocable_r_v<bool, const KeyEqual&, view_type, const K&>)
        return eq(key_storage<Key>::view(s), k);
    else
        return eq(Key(key_storage<Key>::view(s)), k);
}

} // namespace sluice::detail
