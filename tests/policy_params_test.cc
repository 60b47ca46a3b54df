// A policy's parameters declared once (src/policy/params.h): the specs, checks, typed
// options and canonical names all come from one VisitParams, by hand-computed cases.
#include "policy/params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "policy/registry.h"
#include "support/error_of.h"

namespace moex::policy {
namespace {

using testing::ErrorOf;

enum class Mode { kA, kB, kC };

struct TestOptions {
  int n = 3;
  double x = 0.25;
  bool flag = true;
  Mode mode = Mode::kB;
  int64_t big = 0;

  template <class V>
  void VisitParams(V& v) {
    v.Int("n", n, 1, 10, "a count");
    v.Real("x", x, 0, 1, "a share");
    v.Bool("flag", flag, "a switch");
    v.Choice("mode", mode, {{Mode::kA, "a"}, {Mode::kB, "b"}, {Mode::kC, "c"}}, "a choice");
    v.Int("big", big, 0, 1e12, "a large count");
  }
};

using Values = std::vector<std::pair<std::string, std::string>>;

const std::vector<ParamSpec>& Specs() {
  static const std::vector<ParamSpec> specs = ParamSpecsOf<TestOptions>();
  return specs;
}

TestOptions Parse(const Values& values) {
  return CheckParams("t", &Specs(), values).As<TestOptions>();
}

TEST(PolicyParams, SpecsComeFromTheDeclarationInItsOrder) {
  const std::vector<ParamSpec>& s = Specs();
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0].name, "n");
  EXPECT_EQ(s[0].type, ParamType::kInt);
  EXPECT_EQ(s[0].default_value, "3");
  EXPECT_EQ(s[0].min, 1);
  EXPECT_EQ(s[0].max, 10);
  EXPECT_EQ(s[0].doc, "a count");
  EXPECT_EQ(s[1].type, ParamType::kReal);
  EXPECT_EQ(s[1].default_value, "0.25");
  EXPECT_EQ(s[2].type, ParamType::kBool);
  EXPECT_EQ(s[2].default_value, "1");
  EXPECT_FALSE(std::isfinite(s[2].min));  // A bool has no range.
  EXPECT_EQ(s[3].type, ParamType::kString);
  EXPECT_EQ(s[3].default_value, "b");
  EXPECT_EQ(s[3].choices, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(s[4].max, 1e12);
}

TEST(PolicyParams, NoValuesGiveTheMemberInitializers) {
  const TestOptions o = Parse({});
  EXPECT_EQ(o.n, 3);
  EXPECT_EQ(o.x, 0.25);
  EXPECT_TRUE(o.flag);
  EXPECT_EQ(o.mode, Mode::kB);
  EXPECT_EQ(o.big, 0);
}

TEST(PolicyParams, ParsesEveryKindIntoTheTypedStruct) {
  const TestOptions o =
      Parse({{"n", "10"}, {"x", "0.5"}, {"flag", "off"}, {"mode", "c"}, {"big", "1e12"}});
  EXPECT_EQ(o.n, 10);
  EXPECT_EQ(o.x, 0.5);
  EXPECT_FALSE(o.flag);
  EXPECT_EQ(o.mode, Mode::kC);
  EXPECT_EQ(o.big, int64_t{1000000000000});
  EXPECT_EQ(Parse({{"flag", "false"}}).flag, false);
  EXPECT_EQ(Parse({{"flag", "0"}}).flag, false);
  EXPECT_EQ(Parse({{"mode", "a"}}).mode, Mode::kA);
  EXPECT_EQ(Parse({{"n", "1"}, {"n", "2"}}).n, 2);  // The last value of a key counts.
}

TEST(PolicyParams, BadValuesNameThePolicyKeyValueAndWhatIsValid) {
  EXPECT_EQ(ErrorOf([] {
              Parse({{"n", "11"}});
            }),
            "policy t: parameter n='11' is out of range [1, 10]");
  EXPECT_EQ(ErrorOf([] {
              Parse({{"x", "-0.5"}});
            }),
            "policy t: parameter x='-0.5' is out of range [0, 1]");
  EXPECT_EQ(ErrorOf([] {
              Parse({{"n", "2.5"}});
            }),
            "policy t: parameter n='2.5' is not an integer");
  EXPECT_EQ(ErrorOf([] {
              Parse({{"x", "half"}});
            }),
            "policy t: parameter x='half' is not a number");
  EXPECT_EQ(ErrorOf([] {
              Parse({{"flag", "yes"}});
            }),
            "policy t: parameter flag='yes' is not a bool (true/false, 1/0, on/off)");
  EXPECT_EQ(ErrorOf([] {
              Parse({{"mode", "d"}});
            }),
            "policy t: parameter mode='d' is not one of: a, b, c");
  EXPECT_EQ(ErrorOf([] {
              Parse({{"q", "1"}});
            }),
            "policy t has no parameter 'q' (valid: n (int), x (real), flag (bool), mode (string), "
            "big (int))");
  static const std::vector<ParamSpec> none;
  EXPECT_EQ(ErrorOf([] {
              CheckParams("u", &none, {{"q", "1"}});
            }),
            "policy u has no parameter 'q' (it takes no parameters)");
}

// NonDefault lists what differs from the defaults in declaration order, whatever order the
// spec gave; a value written differently but equal to its default ("0.250") is no change.
TEST(PolicyParams, NonDefaultKeepsDeclarationOrder) {
  const Params p = CheckParams("t", &Specs(), {{"mode", "c"}, {"x", "0.250"}, {"n", "5"}});
  EXPECT_EQ(p.NonDefault(), "n=5,mode=c");
  const TestOptions o = p.As<TestOptions>();
  EXPECT_EQ(NonDefault(o), "n=5,mode=c");
  EXPECT_EQ(NonDefault(TestOptions{}), "");
  TestOptions t;
  t.x = 0.1;
  t.flag = false;
  // Reals in their canonical 17-digit form, as a spec's values are.
  EXPECT_EQ(NonDefault(t), "x=0.10000000000000001,flag=0");
  EXPECT_EQ(CheckParams("t", &Specs(), {{"x", "0.1"}, {"flag", "false"}}).NonDefault(),
            NonDefault(t));
  EXPECT_EQ(ParamText(o, "mode"), "c");
  EXPECT_EQ(ParamText(o, "big"), "0");
}

// worker_gflops is declared once (WorkerGflops) and every policy that holds it lists the
// same spec.
TEST(PolicyParams, WorkerGflopsIsOneDeclaration) {
  const std::vector<ParamSpec> w = ParamSpecsOf<WorkerGflops>();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].name, "worker_gflops");
  EXPECT_EQ(w[0].default_value, "20");
  EXPECT_EQ(w[0].min, 0.001);
  EXPECT_EQ(w[0].max, 1e6);
  int holders = 0;
  for (const PolicyInfo* info : RegisteredPolicies())
    for (const ParamSpec& p : info->params)
      if (p.name == WorkerGflops::kName) {
        ++holders;
        EXPECT_EQ(p.default_value, w[0].default_value) << info->name;
        EXPECT_EQ(p.doc, w[0].doc) << info->name;
      }
  EXPECT_GE(holders, 2);  // expertflow, promoe.
}

// A registered policy's choices come from its enum's table, and a spec's bad choice is
// refused with them.
TEST(PolicyParams, RegisteredChoicesComeFromTheEnumTables) {
  const PolicyInfo* moepic = FindPolicy("moepic");
  ASSERT_NE(moepic, nullptr);
  const ParamSpec* evict = nullptr;
  for (const ParamSpec& p : moepic->params)
    if (p.name == "evict") evict = &p;
  ASSERT_NE(evict, nullptr);
  EXPECT_EQ(evict->default_value, "lcp");
  EXPECT_EQ(evict->choices, (std::vector<std::string>{"lcp", "lru", "lfu", "random"}));
  EXPECT_EQ(ErrorOf([] { ResolvePolicySpec("moepic:evict=mru"); }),
            "policy moepic: parameter evict='mru' is not one of: lcp, lru, lfu, random");
  EXPECT_EQ(ResolvePolicySpec("moe-infinity:cache=lru,match_rows=all")[0].params.NonDefault(),
            "cache=lru,match_rows=all");
}

}  // namespace
}  // namespace moex::policy
