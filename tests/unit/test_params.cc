// The parameter table: CHORUS_ names win over NCCL_ aliases, defaults apply when unset, and
// malformed integers fall back to the default instead of being misread.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "common/param.h"
#include "common/status.h"

namespace chorus {
namespace {

TEST(Params, EveryNameIsDeclaredOnceWithADoc) {
  std::set<std::string> names;
  for (const ParamDef& p : paramTable()) {
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate parameter " << p.name;
    EXPECT_GT(std::string(p.doc).size(), 10u) << p.name << " needs a description";
    if (p.type == ParamType::kInt) {
      char* end = nullptr;
      strtoll(p.defaultValue, &end, 0);
      EXPECT_EQ(*end, '\0') << p.name << " default is not an integer";
    }
  }
}

TEST(Params, ChorusNameWinsOverNcclAlias) {
  unsetenv("CHORUS_SHM_DISABLE");
  setenv("NCCL_SHM_DISABLE", "1", 1);
  EXPECT_EQ(paramInt("SHM_DISABLE"), 1);
  EXPECT_EQ(paramRaw("SHM_DISABLE").source, "NCCL_SHM_DISABLE");
  setenv("CHORUS_SHM_DISABLE", "0", 1);
  EXPECT_EQ(paramInt("SHM_DISABLE"), 0);
  EXPECT_EQ(paramRaw("SHM_DISABLE").source, "CHORUS_SHM_DISABLE");
  unsetenv("CHORUS_SHM_DISABLE");
  unsetenv("NCCL_SHM_DISABLE");
  EXPECT_EQ(paramInt("SHM_DISABLE"), 0);
  EXPECT_FALSE(paramRaw("SHM_DISABLE").isSet);
}

TEST(Params, NonAliasedNameIgnoresNcclPrefix) {
  setenv("NCCL_INIT_TIMEOUT", "7", 1);
  unsetenv("CHORUS_INIT_TIMEOUT");
  EXPECT_EQ(paramInt("INIT_TIMEOUT"), 120);
  unsetenv("NCCL_INIT_TIMEOUT");
}

TEST(Params, MalformedIntegerFallsBackToDefault) {
  setenv("CHORUS_STEPS", "eight", 1);
  EXPECT_EQ(paramInt("STEPS"), 8);
  setenv("CHORUS_STEPS", "16x", 1);
  EXPECT_EQ(paramInt("STEPS"), 8);
  setenv("CHORUS_STEPS", "0x10", 1);
  EXPECT_EQ(paramInt("STEPS"), 16);
  unsetenv("CHORUS_STEPS");
}

TEST(Status, FormatsAndKeepsCodeThroughContext) {
  Status s = invalidArgument("count %zu too large", size_t(5));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  Status c = s.withContext("ncclAllReduce");
  EXPECT_EQ(c.code(), Code::kInvalidArgument);
  EXPECT_EQ(c.message(), "ncclAllReduce: count 5 too large");
  EXPECT_TRUE(Status::ok().withContext("x").isOk());
  std::string longText(2000, 'a');
  EXPECT_EQ(formatString("%s", longText.c_str()).size(), 2000u);
}

}  // namespace
}  // namespace chorus
