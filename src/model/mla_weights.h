// Resolves one layer's Multi-head Latent Attention tensors (DeepSeek-V2/V3), including the
// per-head halves of kv_b_proj that the absorbed attention multiplies with (LayerWeights'
// MlaHeads: the file's own bytes where the layout allows, else a transposed copy).
#pragma once

#include "io/weight_source.h"
#include "model/model.h"

namespace moex {

// Fills L's MLA fields (and L.q when there is no q_lora_rank, L.o) for layer `layer`;
// throws Error naming a missing or misshapen tensor.
void LoadMlaWeights(const WeightSource& w, const TensorNames& n, const ModelConfig& c, int layer,
                    LayerWeights& L);

}  // namespace moex
