// The whole demand sequence of a replay, known in advance. Only the simulator has it (it
// reads the trace before replaying), so only the simulator can run Belady's optimal
// eviction, the bound every policy is measured against.
#pragma once

#include <vector>

#include "policy/events.h"

namespace moex::policy {

struct FutureDemand {
  // For each gate event in replay order, the experts it routed to (ascending, unique).
  std::vector<std::vector<ExpertKey>> gates;
};

}  // namespace moex::policy
