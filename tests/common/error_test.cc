// hsring::Error (common/error.h): the classes of the codes, the one exit-code table, the
// message formats the data and checkpoint layers promise, and prepend keeping the code.
#include "common/error.h"

#include <gtest/gtest.h>

#include <string>
#include <type_traits>

namespace hsring {
namespace {

TEST(ErrorTest, EachCodeBelongsToTheClassOfItsRange) {
  EXPECT_EQ(layer_of(Errc::kUsage), ErrorClass::kUsage);
  EXPECT_EQ(layer_of(Errc::kRing), ErrorClass::kRing);
  EXPECT_EQ(layer_of(Errc::kRingNotFound), ErrorClass::kRing);
  EXPECT_EQ(layer_of(Errc::kRingBadName), ErrorClass::kRing);
  EXPECT_EQ(layer_of(Errc::kData), ErrorClass::kData);
  EXPECT_EQ(layer_of(Errc::kModel), ErrorClass::kModel);
  EXPECT_EQ(layer_of(Errc::kModelBadConfig), ErrorClass::kModel);
  EXPECT_EQ(layer_of(Errc::kCheckpoint), ErrorClass::kCheckpoint);
  EXPECT_EQ(layer_of(Errc::kCuda), ErrorClass::kCuda);
  EXPECT_EQ(layer_of(Errc::kGroup), ErrorClass::kGroup);
  EXPECT_EQ(layer_of(Errc::kApiState), ErrorClass::kApi);
  EXPECT_EQ(layer_of(Errc::kApiUnsupported), ErrorClass::kApi);
  EXPECT_EQ(layer_of(Errc::kSystem), ErrorClass::kSystem);
}

TEST(ErrorTest, TheExitCodeTableKeepsTheCodesTheProgramsAlwaysHad) {
  // 2: what the user gives is wrong (flags, data, model folder, checkpoint folder).
  for (ErrorClass c :
       {ErrorClass::kUsage, ErrorClass::kData, ErrorClass::kModel, ErrorClass::kCheckpoint})
    EXPECT_EQ(exit_code_of(c), 2) << to_string(c);
  // 4: setup failed on the machine (kExitRingError, kRunSetupError).
  for (ErrorClass c : {ErrorClass::kRing, ErrorClass::kCuda, ErrorClass::kGroup, ErrorClass::kApi,
                       ErrorClass::kSystem})
    EXPECT_EQ(exit_code_of(c), 4) << to_string(c);
  static_assert(exit_code_of(ErrorClass::kUsage) == 2, "usable in constant expressions");
}

TEST(ErrorTest, EveryCodeHasAName) {
  for (Errc code : {Errc::kUsage, Errc::kRing, Errc::kRingNotFound, Errc::kData, Errc::kModel,
                    Errc::kModelBadConfig, Errc::kCheckpoint, Errc::kCuda, Errc::kGroup,
                    Errc::kApiShape, Errc::kSystem})
    EXPECT_STRNE(to_string(code), "invalid") << int(code);
  // A class's code is named for its class; a code of its own has its own name.
  EXPECT_STREQ(to_string(Errc::kData), "data");
  EXPECT_STREQ(to_string(Errc::kCheckpoint), "checkpoint");
  EXPECT_STREQ(to_string(Errc::kRingNotFound), "not-found");
  EXPECT_STREQ(to_string(Errc::kModelBadConfig), "bad-config");
}

TEST(ErrorTest, MessagesNameTheFileAndTheByte) {
  const Error at_byte(Errc::kData, "/d/a.hstok", 4096, "token checksum mismatch");
  EXPECT_STREQ(at_byte.what(), "/d/a.hstok: byte 4096: token checksum mismatch");
  EXPECT_EQ(at_byte.path(), "/d/a.hstok");
  EXPECT_EQ(at_byte.offset(), 4096u);
  EXPECT_EQ(at_byte.code(), Errc::kData);

  const Error whole(Errc::kCheckpoint, "/ckpt", "held by another writer");
  EXPECT_STREQ(whole.what(), "/ckpt: held by another writer");
  EXPECT_EQ(whole.path(), "/ckpt");
  EXPECT_EQ(whole.offset(), 0u);

  const Error plain(Errc::kCuda, "cudaMalloc failed", 2);
  EXPECT_STREQ(plain.what(), "cudaMalloc failed");
  EXPECT_EQ(plain.path(), "");
  EXPECT_EQ(plain.detail(), 2);
  EXPECT_EQ(plain.layer(), ErrorClass::kCuda);
}

TEST(ErrorTest, PrependAddsContextAndKeepsTheCodeThroughARethrow) {
  try {
    try {
      throw Error(Errc::kModelBadConfig, "/m/config.json: 'hidden_size' is missing");
    } catch (Error& e) {
      e.prepend("--model: ");
      throw;
    }
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--model: /m/config.json: 'hidden_size' is missing");
    EXPECT_EQ(e.code(), Errc::kModelBadConfig);
    EXPECT_EQ(exit_code_of(e.layer()), 2);
    return;
  }
  FAIL() << "not rethrown";
}

TEST(ErrorTest, CopiesShareTheMessageAndCannotThrow) {
  static_assert(std::is_nothrow_copy_constructible_v<Error>);
  Error a(Errc::kRingExists, "ring 'r' already exists");
  const Error b = a;  // as a throw copies it
  a.prepend("hsring: ");
  EXPECT_STREQ(b.what(), "ring 'r' already exists");  // a copy keeps its own text
  EXPECT_STREQ(a.what(), "hsring: ring 'r' already exists");
  const std::runtime_error& base = a;  // callers that catch std::exception see the message
  EXPECT_STREQ(base.what(), "hsring: ring 'r' already exists");
}

}  // namespace
}  // namespace hsring
