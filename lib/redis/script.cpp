#include <sluice/redis/script.hpp>

#include <boost/uuid/detail/sha1.hpp>

#include <cstdio>

namespace sluice::redis {

script::script(std::string lua)
{
    boost::uuids::detail::sha1 h;
    h.process_bytes(lua.data(), lua.size());
    boost::uuids::detail::sha1::digest_type d;
    h.get_digest(d);
    char hex[41];
    for (int i = 0; i < 5; ++i)
        std::snprintf(hex + 8 * i, 9, "%08x", static_cast<unsigned>(d[i]));
    data_ = std::make_shared<const data>(data{std::move(lua), std::string(hex, 40)});
}

} // namespace sluice::redis
