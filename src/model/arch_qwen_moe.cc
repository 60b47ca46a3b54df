// Qwen1.5/Qwen2-MoE (q/k/v biases, one shared expert scaled by a sigmoid gate) and
// Qwen3-MoE (per-head q/k RMSNorm, no shared expert). Both use the default HF names.
#include "model/tensor_names.h"

namespace moex {

TensorNames QwenMoeTensorNames() { return TensorNames{}; }

}  // namespace moex
