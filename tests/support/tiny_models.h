// Writes tiny random models of every architecture for tests (cached per test process).
#pragma once

#include <string>

#include "core/dtype.h"
#include "model/model_config.h"

namespace moex::testing {

// Path of a tiny random HF checkpoint of `arch` in `dtype` (written once per process).
std::string TinyModelPath(Arch arch, DType dtype = DType::kBF16, uint64_t seed = 7);

}  // namespace moex::testing
