// Small models and events for policy unit tests: an OLMoE shape with d = 8, 6 experts per
// layer, top-2 routing and 16 neurons per expert, so hand-computed cases stay small.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "policy/events.h"

namespace moex::testing {

ModelConfig SmallPolicyConfig(int num_layers);

// Layer `layer`'s gate over ids.size() / 2 tokens (two ids per token, of 6 experts), with
// the tokens' gate inputs [tokens, 8] when `hidden` is given.
policy::GateEvent TopTwoGate(int layer, const std::vector<int32_t>& ids,
                             const std::vector<float>* hidden = nullptr);

// A hand-built gate event with its routed set filled (policy::SetRouted, which the engine and
// the trace helpers do for theirs), into storage the test process keeps.
policy::GateEvent Routed(policy::GateEvent e);

}  // namespace moex::testing
