#include "model/hf_quantization.h"

#include "core/error.h"

namespace moex {

namespace {

// Whole-string match of `text` against `pattern`, '*' matching any run of characters.
bool GlobMatch(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace

std::optional<std::string> HfQuantization::NotConverted(
    const std::string& module, const std::vector<std::string>& children) const {
  for (const std::string& entry : modules_to_not_convert) {
    // The module itself or any enclosing module ("model.layers.3.mlp" covers its experts).
    for (size_t end = 0; end != std::string::npos;) {
      end = module.find('.', end + 1);
      if (GlobMatch(entry, module.substr(0, end))) return entry;
    }
  }
  std::optional<std::string> last;
  for (const std::string& child : children) {
    last = std::nullopt;
    for (const std::string& entry : modules_to_not_convert)
      if (GlobMatch(entry, module + "." + child)) last = entry;
    if (!last) return std::nullopt;
  }
  return last;
}

std::optional<std::string> HfQuantization::CoversPartOf(
    const std::string& module, const std::vector<std::string>& children) const {
  if (NotConverted(module, children)) return std::nullopt;
  for (const std::string& entry : modules_to_not_convert)
    for (const std::string& child : children)
      if (GlobMatch(entry, module + "." + child)) return entry;
  return std::nullopt;
}

std::optional<HfQuantization> ParseHfQuantization(const nlohmann::json& config, Arch arch) {
  const auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return std::nullopt;
  Check(it->is_object(), "quantization_config must be an object");
  const auto method = it->find("quant_method");
  Check(method != it->end() && method->is_string(),
        "quantization_config has no quant_method string");
  HfQuantization q;
  q.quant_method = method->get<std::string>();
  Check(q.quant_method == "mxfp4" || q.quant_method == "fp8", "quantization_config.quant_method '",
        q.quant_method,
        "' is not supported (moex reads 'mxfp4', gpt-oss's MXFP4 experts, and 'fp8', "
        "block-scaled FP8 weights)");
  Check(q.quant_method != "mxfp4" || arch == Arch::kGptOss,
        "quantization_config (quant_method 'mxfp4') is supported for gpt_oss only, not ",
        ArchName(arch));
  if (q.quant_method == "fp8") {
    Check(arch != Arch::kGptOss,
          "quantization_config.quant_method 'fp8' is not supported for gpt_oss (its published "
          "experts are MXFP4: 'mxfp4')");
    const auto fmt = it->find("fmt");
    Check(fmt == it->end() || fmt->is_null() ||
              (fmt->is_string() &&
               (fmt->get<std::string>() == "float8_e4m3fn" || fmt->get<std::string>() == "e4m3")),
          "quantization_config.fmt ", fmt == it->end() ? "" : fmt->dump(),
          " is not supported (float8_e4m3fn)");
    const auto scheme = it->find("activation_scheme");
    Check(scheme == it->end() || scheme->is_null() ||
              (scheme->is_string() && scheme->get<std::string>() == "dynamic"),
          "quantization_config.activation_scheme ", scheme == it->end() ? "" : scheme->dump(),
          " is not supported (dynamic: no stored activation scales)");
    const auto block = it->find("weight_block_size");
    Check(block != it->end() && block->is_array() && block->size() == 2 &&
              (*block)[0].is_number_integer() && (*block)[1].is_number_integer() &&
              (*block)[0].get<int64_t>() > 0 && (*block)[1].get<int64_t>() > 0 &&
              (*block)[0].get<int64_t>() <= 65536 && (*block)[1].get<int64_t>() <= 65536,
          "quantization_config.weight_block_size must be [rows, cols] of positive integers "
          "(per-tensor FP8 scales are not supported)");
    q.weight_block = {(*block)[0].get<int>(), (*block)[1].get<int>()};
  }
  const auto list = it->find("modules_to_not_convert");
  if (list != it->end() && !list->is_null()) {
    Check(list->is_array(), "quantization_config.modules_to_not_convert must be a list");
    for (const auto& entry : *list) {
      Check(entry.is_string(), "quantization_config.modules_to_not_convert must hold module ",
            "names, not ", entry.dump());
      q.modules_to_not_convert.push_back(entry.get<std::string>());
    }
  }
  return q;
}

}  // namespace moex
