#include "curves/tfrecord.h"

#include <bit>
#include <boost/crc.hpp>

namespace hsring::curves {

namespace {

// The framing is little-endian whatever the host; hsring builds for x86-64 and aarch64 only.
static_assert(std::endian::native == std::endian::little, "TFRecord framing is little-endian");

template <class T>
void append_le(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

}  // namespace

uint32_t crc32c(const void* bytes, size_t size) {
  // Width 32, polynomial 0x1EDC6F41, initial and final XOR all ones, reflected in and out.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(bytes, size);
  return crc.checksum();
}

uint32_t mask_crc32c(uint32_t crc) { return std::rotr(crc, 15) + 0xA282EAD8u; }

void append_tfrecord(std::string& out, std::string_view data) {
  const uint64_t length = data.size();
  append_le(out, length);
  append_le(out, mask_crc32c(crc32c(&length, sizeof length)));
  out.append(data);
  append_le(out, mask_crc32c(crc32c(data.data(), data.size())));
}

}  // namespace hsring::curves
