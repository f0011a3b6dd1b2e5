// What every error enum of sluice shares, written once: its category (a fixed id, a name,
// a message per value), make_error_code and is_error_code_enum. An enum's header declares
// only its category function and `category_of`; its .cpp only the name, id and messages.
#pragma once

#include <boost/system/error_code.hpp>

#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

namespace sluice::detail {

/// An error enum of sluice: its namespace declares `category_of(E)`, the enum's category,
/// found by argument-dependent lookup.
template <class E>
concept error_enum = std::is_enum_v<E> && requires(E e) {
    { category_of(e) } -> std::same_as<const boost::system::error_category&>;
};

/// `e` as an error_code of its category. Each enum's namespace brings it in with a
/// using-declaration, where argument-dependent lookup (Boost's error_code constructor,
/// `ec == error::closed`) finds it.
template <error_enum E>
boost::system::error_code make_error_code(E e) noexcept
{
    return {static_cast<int>(e), category_of(e)};
}

/// The category of an error enum E: `describe(e)` is the message of each value, nullptr
/// for a value E does not have. The id is fixed, so that codes compare equal across
/// copies of the library in several shared objects.
template <class E>
class enum_category final : public boost::system::error_category {
public:
    using describe_fn = const char* (*)(E) noexcept;

    enum_category(std::uint64_t id, const char* name, describe_fn describe) noexcept
        : error_category(id), name_(name), describe_(describe)
    {
    }

    const char* name() const noexcept override { return name_; }

    std::string message(int ev) const override
    {
        if (const char* m = describe_(static_cast<E>(ev)))
            return m;
        return std::string("unknown ") + name_ + " error";
    }

private:
    const char* name_;
    describe_fn describe_;
};

} // namespace sluice::detail

/// \cond boost_traits (Boost's, not part of sluice's reference)
template <sluice::detail::error_enum E>
struct boost::system::is_error_code_enum<E> : std::true_type {};
/// \endcond
