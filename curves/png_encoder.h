// PNG encoding of an 8-bit RGB image, as the PNG specification's minimum: the signature,
// IHDR, one IDAT (rows filtered with type 0, deflated by zlib) and IEND, each chunk with
// its CRC-32. Enough for curves.png; any PNG reader decodes it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace hsring::curves {

// The PNG file of a `width` x `height` image whose pixels are `rgb`, row after row, three
// bytes each. REQUIRES: rgb.size() == width * height * 3, width and height > 0.
std::string encode_png_rgb(uint32_t width, uint32_t height, std::span<const uint8_t> rgb);

}  // namespace hsring::curves
