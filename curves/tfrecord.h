// TFRecord framing, the container of TensorBoard's event files: each record is its length
// (uint64), the masked CRC-32C of those 8 bytes (uint32), the data, and the masked CRC-32C
// of the data (uint32), all little-endian. The CRC-32C is Boost.CRC's (the Castagnoli
// polynomial); Debian 12 packages no C library of its own for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hsring::curves {

// CRC-32C (Castagnoli, reflected 0x82F63B78; iSCSI, SSE4.2's crc32 instruction) of `size`
// bytes: crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* bytes, size_t size);

// TFRecord's masking of a CRC-32C (rotate right by 15, add 0xA282EAD8), so that a record
// holding CRCs of its own does not checksum to a fixed pattern.
uint32_t mask_crc32c(uint32_t crc);

// Appends `data` framed as one TFRecord to `out`: 16 bytes more than data.size().
void append_tfrecord(std::string& out, std::string_view data);

}  // namespace hsring::curves
