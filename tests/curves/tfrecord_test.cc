// TFRecord framing and CRC-32C (curves/tfrecord.h) against known values: RFC 3720's CRC-32C
// vectors, and a record framed by TensorBoard's own Python code
// (tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c).
#include "curves/tfrecord.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

namespace hsring::curves {
namespace {

TEST(Crc32cTest, MatchesKnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720, B.4.
  const std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  std::vector<uint8_t> ascending(32);
  for (size_t i = 0; i < 32; ++i) ascending[i] = uint8_t(i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(ascending.data(), 32), 0x46DD794Eu);
}

TEST(Crc32cTest, MaskIsTensorFlowsAndInvertible) {
  EXPECT_EQ(mask_crc32c(crc32c("123456789", 9)), 0xC78AB0E5u);
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu}) {
    const uint32_t masked = mask_crc32c(crc);
    EXPECT_NE(masked, crc);
    EXPECT_EQ(std::rotl(masked - 0xA282EAD8u, 15), crc);  // TensorFlow's unmask
  }
}

TEST(TfRecordTest, FramesAsTensorBoardDoes) {
  std::string out = "x";  // appends after what is there
  append_tfrecord(out, "hsring");
  const uint8_t expected[] = {0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x73, 0x69, 0xd5,
                              0x37, 'h',  's',  'r',  'i',  'n',  'g',  0x74, 0xfa, 0x9e, 0x75};
  ASSERT_EQ(out.size(), 1 + sizeof expected);
  EXPECT_EQ(std::memcmp(out.data() + 1, expected, sizeof expected), 0);
}

TEST(TfRecordTest, AnEmptyRecordIsSixteenBytesWithValidChecksums) {
  std::string out;
  append_tfrecord(out, "");
  ASSERT_EQ(out.size(), 16u);
  uint32_t header_crc, data_crc;
  std::memcpy(&header_crc, out.data() + 8, 4);
  std::memcpy(&data_crc, out.data() + 12, 4);
  EXPECT_EQ(header_crc, mask_crc32c(crc32c(out.data(), 8)));
  EXPECT_EQ(data_crc, mask_crc32c(crc32c("", 0)));
}

}  // namespace
}  // namespace hsring::curves
