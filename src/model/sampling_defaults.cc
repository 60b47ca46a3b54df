#include "model/sampling_defaults.h"

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "io/gguf_file.h"
#include "model/hf_checkpoint.h"

namespace moex {

SamplingDefaults SamplingDefaults::FromGenerationConfig(const GenerationConfig& g) {
  SamplingDefaults d;
  if (g.do_sample.value_or(false)) {
    d.temperature = g.temperature.value_or(1.0f);
    d.top_k = g.top_k.value_or(50);
    d.top_p = g.top_p.value_or(1.0f);
    d.min_p = g.min_p.value_or(0.0f);
  }
  d.repetition_penalty = g.repetition_penalty.value_or(1.0f);
  d.repeat_last_n = -1;
  d.source = "generation_config.json";
  d.Validate();
  return d;
}

SamplingDefaults SamplingDefaults::FromGguf(const GgufFile& file) {
  SamplingDefaults d;
  const char* keys[] = {"general.sampling.temp",    "general.sampling.top_k",
                        "general.sampling.top_p",   "general.sampling.min_p",
                        "general.sampling.penalty_repeat", "general.sampling.penalty_last_n"};
  bool any = false;
  for (const char* key : keys) any = any || file.Find(key) != nullptr;
  if (!any) return d;
  d.temperature = static_cast<float>(file.GetFloat("general.sampling.temp", 1.0));
  d.top_k = static_cast<int>(file.GetInt("general.sampling.top_k", 0));
  d.top_p = static_cast<float>(file.GetFloat("general.sampling.top_p", 1.0));
  d.min_p = static_cast<float>(file.GetFloat("general.sampling.min_p", 0.0));
  d.repetition_penalty = static_cast<float>(file.GetFloat("general.sampling.penalty_repeat", 1.0));
  d.repeat_last_n = static_cast<int>(file.GetInt("general.sampling.penalty_last_n", 64));
  d.source = "the GGUF's general.sampling keys";
  d.Validate();
  return d;
}

void SamplingDefaults::Validate() const {
  Check(std::isfinite(temperature) && temperature >= 0.0f, "sampling temperature must be >= 0, got ",
        temperature);
  Check(top_k >= 0, "sampling top_k must be >= 0, got ", top_k);
  Check(top_p > 0.0f && top_p <= 1.0f, "sampling top_p must be in (0, 1], got ", top_p);
  Check(min_p >= 0.0f && min_p <= 1.0f, "sampling min_p must be in [0, 1], got ", min_p);
  Check(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f,
        "repetition penalty must be > 0, got ", repetition_penalty);
  Check(repeat_last_n >= -1, "penalty_last_n must be >= -1, got ", repeat_last_n);
}

nlohmann::json SamplingDefaults::ToJson() const {
  return {{"temperature", temperature},
          {"top_k", top_k},
          {"top_p", top_p},
          {"min_p", min_p},
          {"repetition_penalty", repetition_penalty},
          {"repeat_last_n", repeat_last_n},
          {"source", source}};
}

std::string SamplingDefaults::Describe() const {
  std::ostringstream out;
  if (temperature == 0.0f) {
    out << "greedy";
  } else {
    out << "temperature " << temperature;
    if (top_k > 0) out << ", top-k " << top_k;
    if (top_p < 1.0f) out << ", top-p " << top_p;
    if (min_p > 0.0f) out << ", min-p " << min_p;
  }
  if (repetition_penalty != 1.0f) out << ", repetition penalty " << repetition_penalty;
  out << " (" << source << ")";
  return out.str();
}

}  // namespace moex
