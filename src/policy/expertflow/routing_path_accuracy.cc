#include "policy/expertflow/routing_path_accuracy.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace moex::policy {

BatchAccuracy BatchLevelAccuracy(const std::vector<PathSample>& samples, int batch) {
  Check(batch > 0, "batch-level accuracy needs a batch of at least 1");
  BatchAccuracy a;
  a.batch = batch;
  std::map<int64_t, std::vector<const PathSample*>> by_step;
  int layers = 0, experts = 0;
  for (const PathSample& s : samples) {
    if (s.truth.layers() == 0 || s.predicted.layers() == 0) continue;
    layers = s.truth.layers();
    experts = s.truth.experts();
    by_step[s.step].push_back(&s);
  }
  a.jaccard.assign(static_cast<size_t>(layers), 0);
  a.precision = a.recall = a.exact = a.jaccard;
  std::vector<int64_t> with_pred(static_cast<size_t>(layers), 0),
      with_truth(static_cast<size_t>(layers), 0);
  for (auto& [step, group] : by_step) {
    std::stable_sort(group.begin(), group.end(), [](const PathSample* x, const PathSample* y) {
      return x->request < y->request;
    });
    for (size_t from = 0; from < group.size(); from += static_cast<size_t>(batch)) {
      RoutingPath p(layers, experts), t(layers, experts);
      const size_t to = std::min(group.size(), from + static_cast<size_t>(batch));
      for (size_t i = from; i < to; ++i) {
        p.OrWith(group[i]->predicted);
        t.OrWith(group[i]->truth);
      }
      ++a.batches;
      for (int l = 0; l < layers; ++l) {
        int64_t both = 0, np = 0, nt = 0;
        for (int e = 0; e < experts; ++e) {
          const bool pe = p.Test(l, e), te = t.Test(l, e);
          both += pe && te;
          np += pe;
          nt += te;
        }
        const int64_t either = np + nt - both;
        const size_t L = static_cast<size_t>(l);
        a.jaccard[L] += either ? static_cast<double>(both) / static_cast<double>(either) : 1.0;
        a.exact[L] += both == np && both == nt;
        if (np) {
          a.precision[L] += static_cast<double>(both) / static_cast<double>(np);
          ++with_pred[L];
        }
        if (nt) {
          a.recall[L] += static_cast<double>(both) / static_cast<double>(nt);
          ++with_truth[L];
        }
      }
    }
  }
  for (size_t l = 0; l < static_cast<size_t>(layers); ++l) {
    if (a.batches) {
      a.jaccard[l] /= static_cast<double>(a.batches);
      a.exact[l] /= static_cast<double>(a.batches);
    }
    if (with_pred[l]) a.precision[l] /= static_cast<double>(with_pred[l]);
    if (with_truth[l]) a.recall[l] /= static_cast<double>(with_truth[l]);
    a.mean_jaccard += a.jaccard[l] / layers;
    a.mean_precision += a.precision[l] / layers;
    a.mean_recall += a.recall[l] / layers;
    a.mean_exact += a.exact[l] / layers;
  }
  return a;
}

}  // namespace moex::policy
