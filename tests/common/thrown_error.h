// What a call throws, for the tests of refusals: the hsring::Error's code or its words. A call
// that throws nothing fails the test, so an expected refusal that never comes cannot pass.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace hsring::testing {

template <class Fn>
Errc thrown_code(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no Error thrown";
  return Errc::kSystem;
}

template <class Fn>
std::string thrown_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return "no Error thrown";
}

}  // namespace hsring::testing
