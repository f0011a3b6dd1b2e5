// A Beast body read into a string that keeps at most `cap` bytes, the cap chosen between
// the header and the body (it depends on the answer's status and type). Beast's own
// body_limit cannot do this: it compares a Content-Length with the limit while it parses
// the header, and never again, so a limit set after the header lets a body of any declared
// length be read whole. Here the reader itself stops: the first `cap` bytes are kept, and
// the read ends with http::error::body_limit at the first byte past them (the connection
// is then closed, not drained). Sans-io: Beast's parser drives it.
#pragma once

#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace crawl {

struct capped_body {
    struct value_type {
        std::string text;
        std::size_t cap = 0;   // the most bytes kept: set before the body is read
    };

    class reader {
    public:
        template <bool isRequest, class Fields>
        reader(boost::beast::http::header<isRequest, Fields>&, value_type& b) : body_(b)
        {
        }

        void init(const boost::optional<std::uint64_t>& length, boost::beast::error_code& ec)
        {
            // A declared length is believed only up to the cap.
            if (length) body_.text.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(*length, body_.cap)));
            ec = {};
        }

        template <class ConstBufferSequence>
        std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec)
        {
            ec = {};
            std::size_t took = 0;
            for (auto b : boost::beast::buffers_range_ref(buffers)) {
                const std::size_t room = body_.cap - std::min(body_.cap, body_.text.size());
                const std::size_t n = std::min(room, b.size());
                body_.text.append(static_cast<const char*>(b.data()), n);
                took += n;
                if (n < b.size()) {
                    ec = boost::beast::http::error::body_limit;
                    break;
                }
            }
            return took;
        }

        void finish(boost::beast::error_code& ec) { ec = {}; }

    private:
        value_type& body_;
    };
};

} // namespace crawl
