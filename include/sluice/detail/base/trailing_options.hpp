// Splits an optional options object off the end of a constructor's argument pack.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace sluice::detail {

/// Whether the last of Args is an Options (a variadic constructor takes its options last,
/// and only a named object: a braced list cannot be deduced into a pack).
template <class Options, class... Args>
inline constexpr bool trailing_options_v = [] {
    if constexpr (sizeof...(Args) == 0)
        return false;
    else
        return std::is_same_v<std::remove_cvref_t<std::tuple_element_t<sizeof...(Args) - 1, std::tuple<Args...>>>,
                              Options>;
}();

/// Calls f(options, args...) with the trailing Options of `args` (or a default Options when
/// there is none) moved to the front.
template <class Options, class F, class... Args>
auto with_trailing_options(F&& f, Args&&... args)
{
    constexpr std::size_t count = (std::size_t{std::is_same_v<std::remove_cvref_t<Args>, Options>} + ... + 0);
    constexpr bool last = trailing_options_v<Options, Args...>;
    static_assert(count == 0 || (count == 1 && last), "the options argument goes last");
    if constexpr (last) {
        auto t = std::forward_as_tuple(std::forward<Args>(args)...);
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
            return f(std::as_const(std::get<sizeof...(Args) - 1>(t)), std::get<I>(std::move(t))...);
        }(std::make_index_sequence<sizeof...(Args) - 1>{});
    } else {
        const Options defaults{};
        return f(defaults, std::forward<Args>(args)...);
    }
}

} // namespace sluice::detail
