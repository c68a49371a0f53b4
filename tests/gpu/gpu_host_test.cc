// The host-side pieces of the GPU data path, tested in every build (no GPU needed): the
// noise schedule, the memlock check and its message, and the counter-based generator
// that the GPU noise kernel shares with the host.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "common/error.h"
#include "gpu/memlock.h"
#include "gpu/noise_schedule.h"
#include "gpu/philox.h"

namespace hsring::gpu {
namespace {

TEST(NoiseScheduleTest, ConstantUsesNoiseStd) {
  const NoiseSchedule s = parse_noise_schedule("constant", 0.25);
  EXPECT_EQ(s.kind, NoiseSchedule::Kind::kConstant);
  EXPECT_DOUBLE_EQ(s.std_at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.std_at(1'000'000), 0.25);
  EXPECT_TRUE(s.enabled());
  EXPECT_FALSE(parse_noise_schedule("constant", 0).enabled());
}

TEST(NoiseScheduleTest, LinearRampsThenHolds) {
  const NoiseSchedule s = parse_noise_schedule("linear:0.2,0.0,100", 0);
  EXPECT_EQ(s.kind, NoiseSchedule::Kind::kLinear);
  EXPECT_DOUBLE_EQ(s.std_at(0), 0.2);
  EXPECT_NEAR(s.std_at(50), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(s.std_at(100), 0.0);
  EXPECT_DOUBLE_EQ(s.std_at(5000), 0.0);
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(parse_noise_schedule(s.describe(), 0).steps, 100u);
}

TEST(NoiseScheduleTest, RejectsMalformedSchedulesNamingTheForms) {
  for (const char* bad : {"", "cosine", "linear:", "linear:1,2", "linear:1,2,3,4", "linear:a,0,10",
                          "linear:0.1,0,0", "linear:-1,0,10", "linear:0.1,0,ten"}) {
    try {
      parse_noise_schedule(bad, 0.1);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("linear:START,END,STEPS"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(parse_noise_schedule("constant", -1), Error);
  EXPECT_THROW(parse_noise_schedule("constant", NAN), Error);
}

TEST(MemlockTest, ProblemNamesTheLimitAndHowToRaiseIt) {
  EXPECT_EQ(memlock_problem(0, "ring 'x'"), "");
  const uint64_t limit = memlock_limit_bytes();
  if (limit == UINT64_MAX) GTEST_SKIP() << "RLIMIT_MEMLOCK is unlimited here: nothing to exceed";
  const std::string problem = memlock_problem(limit + (1ull << 30), "ring 'x'");
  EXPECT_NE(problem.find("ring 'x'"), std::string::npos) << problem;
  EXPECT_NE(problem.find("ulimit -l"), std::string::npos) << problem;
  EXPECT_NE(problem.find("LimitMEMLOCK=infinity"), std::string::npos) << problem;
  EXPECT_EQ(memlock_problem(limit, "ring 'x'"), "");
}

TEST(MemlockTest, HumanBytes) {
  EXPECT_EQ(human_bytes(64 << 10), "64 KiB");
  EXPECT_EQ(human_bytes(640ull << 20), "640 MiB");
  EXPECT_EQ(human_bytes(3ull << 29), "1.5 GiB");
}

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  struct Vector {
    uint32_t counter[4], key[2], expected[4];
  };
  const Vector vectors[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Vector& v : vectors) {
    uint32_t c[4] = {v.counter[0], v.counter[1], v.counter[2], v.counter[3]};
    philox4x32_10(c, v.key[0], v.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(c[i], v.expected[i]) << "word " << i;
  }
}

TEST(PhiloxTest, GaussianIsStandardNormalAndKeyedBySeedAndStep) {
  double sum = 0, sum_sq = 0;
  const int groups = 50000;
  for (int g = 0; g < groups; ++g) {
    float n[4];
    gaussian4(7, 3, uint64_t(g), n);
    for (float x : n) {
      ASSERT_TRUE(std::isfinite(x));
      sum += x;
      sum_sq += double(x) * x;
    }
  }
  const double count = 4.0 * groups;
  EXPECT_NEAR(sum / count, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / count, 1.0, 0.02);
  float a[4], b[4], c[4], d[4];
  gaussian4(7, 3, 11, a);
  gaussian4(7, 3, 11, b);
  gaussian4(7, 4, 11, c);
  gaussian4(8, 3, 11, d);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a[i], b[i]);
  EXPECT_NE(a[0], c[0]) << "another step must give other noise";
  EXPECT_NE(a[0], d[0]) << "another seed must give other noise";
}

}  // namespace
}  // namespace hsring::gpu
