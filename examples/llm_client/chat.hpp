// The JSON of an OpenAI-compatible chat completion (Boost.JSON): the request llm_client
// sends, and the usage it reads back. The answer is input from outside: its size is bounded
// before it gets here (the HTTP reader), its nesting by the parser, and every value read is
// checked; whatever does not fit is refused with a reason, never trusted or clamped.
// Boost.JSON is used header-only: exactly one source file of each program includes
// <boost/json/src.hpp>.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llm {

/// The body of `POST /v1/chat/completions`: one user message, up to max_tokens of output.
inline std::string chat_request(std::string_view model, std::string_view prompt, std::uint64_t max_tokens)
{
    boost::json::object msg{{"role", "user"}, {"content", prompt}};
    boost::json::object req{{"model", model}, {"max_tokens", max_tokens}, {"messages", boost::json::array{msg}}};
    return boost::json::serialize(req);
}

/// What a completed call used, from the answer's `usage`.
struct usage {
    std::uint64_t prompt_tokens = 0;     ///< usage.prompt_tokens
    std::uint64_t completion_tokens = 0; ///< usage.completion_tokens
    std::uint64_t total() const noexcept { return prompt_tokens + completion_tokens; }
};

/// Counts beyond this are not a call's usage (and their sum cannot overflow).
inline constexpr std::uint64_t max_usage_tokens = std::uint64_t{1} << 40;

/// The usage of a chat completion's answer `body`; nullopt, with the reason in `why`, when the
/// body is not JSON, not an object, has no `usage` object, or a count that is missing, not
/// a non-negative integer, or beyond max_usage_tokens; or a completion longer than
/// `max_tokens`, the most the call asked for.
inline std::optional<usage> read_usage(std::string_view body, std::uint64_t max_tokens, std::string& why)
{
    boost::system::error_code ec;
    boost::json::parse_options opt;
    opt.max_depth = 16;
    boost::json::value v = boost::json::parse(body, ec, {}, opt);
    if (ec) {
        why = "not JSON: " + ec.message();
        return std::nullopt;
    }
    const auto* root = v.if_object();
    const auto* u = root ? root->if_contains("usage") : nullptr;
    const auto* uo = u ? u->if_object() : nullptr;
    if (!uo) {
        why = "no usage object";
        return std::nullopt;
    }
    auto count = [&](const char* name) -> std::optional<std::uint64_t> {
        const auto* c = uo->if_contains(name);
        std::uint64_t n = 0;
        if (c && c->is_uint64()) n = c->get_uint64();
        else if (c && c->is_int64() && c->get_int64() >= 0) n = static_cast<std::uint64_t>(c->get_int64());
        else {
            why = std::string("usage.") + name + (c ? " is not a non-negative integer" : " is missing");
            return std::nullopt;
        }
        if (n > max_usage_tokens) {
            why = std::string("usage.") + name + " is beyond any call's";
            return std::nullopt;
        }
        return n;
    };
    auto p = count("prompt_tokens");
    if (!p) return std::nullopt;
    auto c = count("completion_tokens");
    if (!c) return std::nullopt;
    if (*c > max_tokens) {
        why = "usage.completion_tokens is above the call's max_tokens";
        return std::nullopt;
    }
    return usage{*p, *c};
}

} // namespace llm
