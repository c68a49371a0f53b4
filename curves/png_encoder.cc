#include "curves/png_encoder.h"

#include <zlib.h>

#include <stdexcept>
#include <string_view>
#include <vector>

#include "common/contract.h"
#include "common/error.h"

namespace hsring::curves {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (const int shift : {24, 16, 8, 0}) out.push_back(char((v >> shift) & 0xFF));
}

// Length, type, data and the CRC-32 of type and data (PNG's, which is zlib's).
void put_chunk(std::string& out, std::string_view type, std::string_view data) {
  put_u32(out, uint32_t(data.size()));
  const size_t type_at = out.size();
  out.append(type).append(data);
  const auto* bytes = reinterpret_cast<const Bytef*>(out.data() + type_at);
  put_u32(out, uint32_t(::crc32(::crc32(0, nullptr, 0), bytes, uInt(out.size() - type_at))));
}

}  // namespace

std::string encode_png_rgb(uint32_t width, uint32_t height, std::span<const uint8_t> rgb) {
  HSRING_REQUIRE(width > 0 && height > 0 && rgb.size() == size_t(width) * height * 3);
  // Each row: filter type 0 (None), then its pixels.
  const size_t row = size_t(width) * 3;
  std::vector<uint8_t> raw;
  raw.reserve((row + 1) * height);
  for (uint32_t y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + std::ptrdiff_t(y * row),
               rgb.begin() + std::ptrdiff_t((y + 1) * row));
  }
  uLongf deflated_size = ::compressBound(uLong(raw.size()));
  std::string deflated(deflated_size, '\0');
  if (::compress2(reinterpret_cast<Bytef*>(deflated.data()), &deflated_size, raw.data(),
                  uLong(raw.size()), Z_BEST_COMPRESSION) != Z_OK)
    throw Error(Errc::kSystem, "zlib could not compress the image");
  deflated.resize(deflated_size);

  std::string png = "\x89PNG\r\n\x1a\n";
  std::string header;
  put_u32(header, width);
  put_u32(header, height);
  header +=
      std::string_view("\x08\x02\x00\x00\x00", 5);  // 8 bits, RGB, deflate, filter 0, no interlace
  put_chunk(png, "IHDR", header);
  put_chunk(png, "IDAT", deflated);
  put_chunk(png, "IEND", "");
  return png;
}

}  // namespace hsring::curves
