// Redis Cluster key slots: CRC16 (XMODEM) of the key or of its hash tag, modulo 16384.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice::redis {

/// The number of hash slots of a Redis Cluster.
inline constexpr std::uint16_t cluster_slots = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster uses it.
constexpr std::uint16_t crc16(std::string_view data) noexcept
{
    std::uint16_t crc = 0;
    for (unsigned char c : data) {
        crc = static_cast<std::uint16_t>(crc ^ (static_cast<std::uint16_t>(c) << 8));
        for (int i = 0; i < 8; ++i)
            crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

/// The part of a key that is hashed: the text between the first '{' and the next '}' if
/// that is not empty ("{user1000}.following"), otherwise the whole key.
constexpr std::string_view hash_tag(std::string_view key) noexcept
{
    auto open = key.find('{');
    if (open == std::string_view::npos) return key;
    auto close = key.find('}', open + 1);
    if (close == std::string_view::npos || close == open + 1) return key;
    return key.substr(open + 1, close - open - 1);
}

/// The cluster slot of a key, in [0, 16384).
constexpr std::uint16_t key_slot(std::string_view key) noexcept
{
    return static_cast<std::uint16_t>(crc16(hash_tag(key)) % cluster_slots);
}

} // namespace sluice::redis
