// OLMoE: q/k RMSNorm over the whole projected vector (before the split into heads),
// top-8 of 64 without renormalisation. Default HF names.
#include "model/tensor_names.h"

namespace moex {

TensorNames OlmoeTensorNames() { return TensorNames{}; }

}  // namespace moex
