// Helpers of the tests that run the IB network over the stand-in verbs library
// (CHORUS_IB_VERBS_LIBRARY names it; tests/ib/fake_verbs.cc).
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "tests/ib/fake_verbs.h"
#include "transport/ib/verbs.h"
#include "transport/net_plugin/net_plugin.h"

// The stand-in verbs, loaded once.
inline const chorus::VerbsApi* fakeVerbs() {
  static std::unique_ptr<const chorus::VerbsApi> verbs;
  if (verbs != nullptr) return verbs.get();
  const char* lib = getenv("CHORUS_IB_VERBS_LIBRARY");
  EXPECT_NE(lib, nullptr) << "CHORUS_IB_VERBS_LIBRARY names the stand-in verbs library";
  if (lib == nullptr) return nullptr;
  auto v = chorus::loadVerbs(lib);
  EXPECT_TRUE(v.isOk()) << v.status().message();
  if (v.isOk()) verbs = v.take();
  return verbs.get();
}

inline FakeVerbsStats fakeStats() {
  void* lib = dlopen(getenv("CHORUS_IB_VERBS_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
  FakeVerbsStats s;
  memset(&s, 0, sizeof s);
  if (lib == nullptr) return s;
  auto fn = reinterpret_cast<FakeVerbsStatsFn>(dlsym(lib, "fake_verbs_stats"));
  if (fn != nullptr) fn(&s);
  return s;
}

inline void failWrites(int n) {
  void* lib = dlopen(getenv("CHORUS_IB_VERBS_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto fn = reinterpret_cast<FakeVerbsFailWritesFn>(dlsym(lib, "fake_verbs_fail_writes"));
  ASSERT_NE(fn, nullptr);
  fn(n);
}

// Polls both requests to their end; false when either failed (its message in *why).
inline bool finish(chorus::NetPlugin& p, void* sreq, void* rreq, size_t* sent, size_t* got,
                   std::string* why) {
  bool sdone = sreq == nullptr, rdone = rreq == nullptr;
  for (long i = 0; i < 10000000 && !(sdone && rdone); ++i) {
    if (!sdone) {
      auto s = p.test(sreq, &sdone, sent);
      if (!s.isOk()) return *why = s.message(), false;
    }
    if (!rdone) {
      auto s = p.test(rreq, &rdone, got);
      if (!s.isOk()) return *why = s.message(), false;
    }
  }
  if (!(sdone && rdone)) *why = "not done";
  return sdone && rdone;
}
