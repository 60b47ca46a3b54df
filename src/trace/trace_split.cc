#include "trace/trace_split.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <vector>

#include "core/error.h"
#include "trace/trace_reader.h"
#include "trace/trace_writer.h"

namespace moex::trace {

namespace {

bool SamePath(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec)) return true;
  return std::filesystem::weakly_canonical(a, ec) == std::filesystem::weakly_canonical(b, ec);
}

// The rows of `it` that belong to requests for which `keep` is true, or an iteration with no
// requests when none do.
TraceIteration SelectRequests(const TraceIteration& it, const std::vector<bool>& keep,
                              const TraceHeader& h) {
  TraceIteration out;
  const size_t d = static_cast<size_t>(h.model.hidden_size);
  std::vector<std::pair<int64_t, int64_t>> rows;  // [begin, end) token rows kept.
  int64_t at = 0;
  for (size_t r = 0; r < it.requests.size(); ++r) {
    const int64_t n = it.token_counts[r];
    if (keep[r]) {
      out.requests.push_back(it.requests[r]);
      out.token_counts.push_back(n);
      out.tokens.insert(out.tokens.end(), it.tokens.begin() + at, it.tokens.begin() + at + n);
      if (!it.pooled.empty())
        out.pooled.insert(out.pooled.end(), it.pooled.begin() + static_cast<int64_t>(r * d),
                          it.pooled.begin() + static_cast<int64_t>((r + 1) * d));
      rows.emplace_back(at, at + n);
    }
    at += n;
  }
  if (out.requests.empty()) return out;
  const size_t experts = static_cast<size_t>(h.model.num_experts);
  for (const TraceGate& g : it.gates) {
    TraceGate s;
    s.layer = g.layer;
    s.top_k = g.top_k;
    const size_t k = static_cast<size_t>(g.top_k);
    auto copy_rows = [&](const auto& from, auto* to, size_t width) {
      if (from.empty()) return;
      for (const auto& [b, e] : rows)
        to->insert(to->end(), from.begin() + static_cast<int64_t>(b * width),
                   from.begin() + static_cast<int64_t>(e * width));
    };
    for (const auto& [b, e] : rows) s.n_tokens += e - b;
    copy_rows(g.ids, &s.ids, k);
    copy_rows(g.weights, &s.weights, k);
    copy_rows(g.probs, &s.probs, experts);
    copy_rows(g.hidden, &s.hidden, d);
    out.gates.push_back(std::move(s));
  }
  return out;
}

}  // namespace

SplitSummary SplitTrace(const SplitOptions& o) {
  Check(o.learn_fraction > 0.0 && o.learn_fraction < 1.0, "trace split: the learning fraction ",
        o.learn_fraction, " is not between 0 and 1");
  Check(!SamePath(o.learn_out, o.test_out),
        "trace split: the learning and test outputs are one "
        "file (",
        o.learn_out, ")");
  Check(!SamePath(o.input, o.learn_out) && !SamePath(o.input, o.test_out),
        "trace split: an output would replace the input trace ", o.input);

  TraceReader reader(o.input);
  std::vector<int64_t> order;  // Request ids in the order they began.
  TraceEvent e;
  while (reader.Next(&e))
    if (e.kind == TraceEvent::kRequestBegin) order.push_back(e.request);
  const int64_t n = static_cast<int64_t>(order.size());
  Check(n >= 2, "trace split: ", o.input, " has ", n, " request(s); splitting needs at least two");
  const int64_t n_learn =
      std::clamp<int64_t>(std::llround(o.learn_fraction * static_cast<double>(n)), 1, n - 1);
  const std::set<int64_t> learning(order.begin(), order.begin() + n_learn);

  SplitSummary summary;
  summary.learn = {n_learn, order.front(), order[static_cast<size_t>(n_learn - 1)], 0};
  summary.test = {n - n_learn, order[static_cast<size_t>(n_learn)], order.back(), 0};

  auto header_of = [&](const char* part, const SplitPart& p) {
    TraceHeader h = reader.header();
    h.info["split"] = {{"of", std::filesystem::path(o.input).filename().string()},
                       {"part", part},
                       {"learn_fraction", o.learn_fraction},
                       {"requests", p.requests},
                       {"first_request", p.first_request},
                       {"last_request", p.last_request}};
    return h;
  };
  TraceWriter learn(o.learn_out, header_of("learn", summary.learn));
  TraceWriter test(o.test_out, header_of("test", summary.test));
  for (const std::string& name : reader.tensors().Names()) {
    const TensorView* t = reader.tensors().Find(name);
    learn.WriteTensor(*t);
    test.WriteTensor(*t);
  }

  reader.Rewind();
  while (reader.Next(&e)) {
    if (e.kind != TraceEvent::kIteration) {
      (learning.count(e.request) ? learn : test).Write(e);
      continue;
    }
    const TraceIteration& it = e.iteration;
    std::vector<bool> keep(it.requests.size());
    for (size_t r = 0; r < keep.size(); ++r) keep[r] = learning.count(it.requests[r]) > 0;
    for (int side = 0; side < 2; ++side) {
      TraceEvent part;
      part.kind = TraceEvent::kIteration;
      part.iteration = SelectRequests(it, keep, reader.header());
      if (!part.iteration.requests.empty()) {
        SplitPart& p = side == 0 ? summary.learn : summary.test;
        part.iteration.iteration = p.iterations++;
        (side == 0 ? learn : test).Write(part);
      }
      keep.flip();
    }
  }
  learn.Finish();
  test.Finish();
  return summary;
}

}  // namespace moex::trace
