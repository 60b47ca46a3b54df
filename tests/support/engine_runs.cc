#include "support/engine_runs.h"

#include "engine/generator.h"
#include "engine/transformer.h"
#include "trace/trace_recorder.h"
#include "trace/trace_writer.h"

namespace moex::testing {

std::vector<float> PrefillLogits(const Model& model, MoeExecutor& executor,
                                 const std::vector<int32_t>& ids) {
  Transformer t(model, executor);
  KvCache cache(model.config, static_cast<int64_t>(ids.size()) + 8);
  BatchItem item{&cache, ids, true};
  return t.Forward({&item, 1});
}

std::vector<std::vector<int32_t>> GreedyTokens(const Model& model, MoeExecutor& executor) {
  Transformer t(model, executor);
  Generator g(t);
  GenerationRequest a, b;
  a.prompt = {5, 9, 200, 31, 7};
  a.max_tokens = 10;
  b.prompt = {77, 3};
  b.max_tokens = 7;
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : g.Generate({a, b})) out.push_back(r.tokens);
  return out;
}

void RecordLearningTrace(const Model& model, const std::string& path) {
  ResidentMoeExecutor resident(model);
  Transformer t(model, resident);
  trace::TraceHeader h;
  h.source = "test";
  h.model = trace::TraceModelOf(model);
  trace::TraceWriter writer(path, h);
  trace::TraceRecorder recorder(writer, model);
  t.AddSink(&recorder);
  Generator g(t);
  GenerationRequest a, b;
  a.prompt = {5, 9, 200, 31, 7, 64, 12, 90};
  a.max_tokens = 12;
  b.prompt = {77, 3, 41};
  b.max_tokens = 9;
  g.Generate({a, b});
  g.Generate({b});
  writer.Finish();
}

std::vector<float> OffloadedPrefillLogits(const Model& model, const std::vector<int32_t>& ids,
                                          const std::string& store_path, const char* budget,
                                          const char* policy) {
  OffloadOptions o;
  o.store_path = store_path;
  o.host_budget = budget;
  o.policy.spec = policy;
  o.progress = false;
  OffloadMoeExecutor offload(model, o);
  return PrefillLogits(model, offload, ids);
}

}  // namespace moex::testing
