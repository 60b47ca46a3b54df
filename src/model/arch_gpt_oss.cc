// gpt-oss: Llama-style names for attention (q/k/v/o with biases) and norms, the per-head
// attention sinks (self_attn.sinks), the router under mlp.router (weight and bias). The
// routed experts are read per expert under the default names (mlp.experts.{e}.gate_proj
// etc.) and their biases per layer: an HF checkpoint stores them fused and gate/up
// interleaved, and model/gpt_oss_weights.h presents them in this form; a GGUF stores them
// this way already.
#include "model/tensor_names.h"

namespace moex {

TensorNames GptOssTensorNames() {
  TensorNames n;
  n.router = "mlp.router.weight";
  n.router_linear_bias = "mlp.router.bias";
  return n;
}

}  // namespace moex
