#include "serve/access_log.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moex::serve {

AccessLogFormat ParseAccessLogFormat(const std::string& name) {
  if (name == "off") return AccessLogFormat::kOff;
  if (name == "text") return AccessLogFormat::kText;
  if (name == "json") return AccessLogFormat::kJson;
  Fail("unknown log format '", name, "' (text, json or off)");
}

std::string FormatAccessRecord(const AccessRecord& r, AccessLogFormat format) {
  if (format == AccessLogFormat::kJson) {
    nlohmann::json j = {{"remote", r.remote},
                        {"method", r.method},
                        {"path", r.path},
                        {"status", r.status},
                        {"duration_ms", r.duration_ms}};
    if (r.prompt_tokens >= 0) j["prompt_tokens"] = r.prompt_tokens;
    if (r.completion_tokens >= 0) j["completion_tokens"] = r.completion_tokens;
    if (r.ttft_ms >= 0) j["ttft_ms"] = r.ttft_ms;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  char line[160];
  std::string out = r.remote + " " + r.method + " ";
  // The path is the client's: keep the line one line.
  for (const char c : r.path) out += c >= 0x20 && c < 0x7f ? c : '?';
  std::snprintf(line, sizeof line, " %d", r.status);
  out += line;
  if (r.prompt_tokens >= 0) {
    std::snprintf(line, sizeof line, " prompt=%lld completion=%lld",
                  static_cast<long long>(r.prompt_tokens),
                  static_cast<long long>(std::max<int64_t>(0, r.completion_tokens)));
    out += line;
  }
  if (r.ttft_ms >= 0) {
    std::snprintf(line, sizeof line, " ttft=%.1fms", r.ttft_ms);
    out += line;
  }
  std::snprintf(line, sizeof line, " %.1fms", r.duration_ms);
  return out + line;
}

void AccessLog::Begin(const void* key) {
  if (!enabled()) return;
  const MutexLock lock(&mu_);
  entries_[key] = {Clock::now(), nullptr};
}

std::shared_ptr<AccessRecord> AccessLog::Record(const void* key) {
  if (!enabled()) return nullptr;
  const MutexLock lock(&mu_);
  Entry& e = entries_[key];
  if (!e.record) e.record = std::make_shared<AccessRecord>();
  return e.record;
}

void AccessLog::End(const void* key, const std::string& remote, const std::string& method,
                    const std::string& path, int status) {
  if (!enabled()) return;
  AccessRecord r;
  {
    const MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      if (it->second.record) r = *it->second.record;
      r.duration_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - it->second.start).count();
      entries_.erase(it);
    }
  }
  if (status == 0) return;
  r.remote = remote;
  r.method = method;
  r.path = path;
  r.status = status;
  const std::string line = FormatAccessRecord(r, format_) + "\n";
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace moex::serve
