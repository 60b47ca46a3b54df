// The routing traces shipped with the demo model (models/olmoe-demo/traces) must be what
// the shipped weights route: re-running their first requests gives the same tokens and
// expert ids, and gate weights equal up to float rounding (another SIMD target than the
// recording host's sums in another order). A retrained model without re-recorded traces
// fails here.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/generator.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "sim/replay.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"
#include "trace/trace_reader.h"
#include "trace/trace_recorder.h"

namespace moex {
namespace {

const std::string kDemo = (testing::SourceDir() / "models/olmoe-demo").string();

TEST(DemoTraces, MatchTheShippedWeights) {
  const std::string shipped = kDemo + "/traces/gsm8k.trace";
  ASSERT_TRUE(std::filesystem::exists(shipped));
  trace::TraceReader want(shipped);
  const int max_tokens = want.header().info.at("max_tokens").get<int>();

  // The first two requests' prompts, as recorded.
  std::vector<GenerationRequest> requests;
  trace::TraceEvent e;
  while (requests.size() < 2 && want.Next(&e)) {
    if (e.kind != trace::TraceEvent::kRequestBegin) continue;
    GenerationRequest r;
    r.prompt = e.prompt;
    r.max_tokens = max_tokens;
    requests.push_back(r);
  }
  ASSERT_EQ(requests.size(), 2u);

  auto model = LoadModel(kDemo);
  for (GenerationRequest& r : requests) r.stop_ids = model->config.eos_token_ids;
  testing::TempDir dir;
  {
    ResidentMoeExecutor executor(*model);
    Transformer t(*model, executor);
    trace::TraceHeader h = want.header();
    trace::TraceWriter writer(dir / "again.trace", h);
    trace::TraceRecorder recorder(writer, *model);
    t.AddSink(&recorder);
    Generator g(t);
    for (const GenerationRequest& r : requests) g.Generate({r});
    writer.Finish();
  }
  trace::TraceReader got(dir / "again.trace");
  want.Rewind();
  trace::TraceEvent a, b;
  int64_t events = 0;
  while (got.Next(&a)) {
    ASSERT_TRUE(want.Next(&b));
    ASSERT_EQ(a.kind, b.kind) << "event " << events;
    EXPECT_EQ(a.request, b.request);
    EXPECT_EQ(a.prompt, b.prompt);
    EXPECT_EQ(a.iteration.tokens, b.iteration.tokens) << "event " << events;
    ASSERT_EQ(a.iteration.gates.size(), b.iteration.gates.size());
    for (size_t g = 0; g < a.iteration.gates.size(); ++g) {
      EXPECT_EQ(a.iteration.gates[g].ids, b.iteration.gates[g].ids) << "event " << events;
      // Within float rounding: the traces were recorded on one SIMD target (AVX-512) and
      // each target's kernels sum in their own order.
      ASSERT_EQ(a.iteration.gates[g].weights.size(), b.iteration.gates[g].weights.size());
      for (size_t k = 0; k < a.iteration.gates[g].weights.size(); ++k)
        EXPECT_NEAR(a.iteration.gates[g].weights[k], b.iteration.gates[g].weights[k], 1e-5)
            << "event " << events;
    }
    ++events;
  }
  EXPECT_GT(events, 10);
}

TEST(DemoTraces, ReplayInTheSimulator) {
  for (const char* name : {"sharegpt", "gsm8k", "mtbench"}) {
    trace::TraceReader reader(kDemo + "/traces/" + name + ".trace");
    sim::ReplayOptions o;
    o.policy.spec = "lru";
    o.budget = "25%";
    o.hardware = sim::LoadHardwareProfile("this-machine");
    const sim::ReplayResult r = sim::Replay(reader, o);
    EXPECT_GT(r.requests, 30) << name;
    EXPECT_GT(r.total.hits + r.total.misses, 0) << name;
    EXPECT_GT(r.tpot_ms, 0) << name;
  }
}

}  // namespace
}  // namespace moex
