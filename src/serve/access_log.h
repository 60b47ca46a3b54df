// One line per HTTP request, written when its response has been sent (a stream's at its
// end): who asked, what, the status, the tokens in and out, the time to the first token and
// the whole duration. As text for people or as one JSON object per line for log pipelines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/clock.h"
#include "core/mutex.h"

namespace moex::serve {

enum class AccessLogFormat { kOff, kText, kJson };

// Throws Error for a name other than off, text or json.
AccessLogFormat ParseAccessLogFormat(const std::string& name);

// What a request's handler learns of it; the line is written from it.
struct AccessRecord {
  std::string remote;
  std::string method;
  std::string path;
  int status = 0;
  int64_t prompt_tokens = -1;  // -1: not a completion (left out of the line).
  int64_t completion_tokens = -1;
  double ttft_ms = -1;  // -1: no token was generated.
  double duration_ms = 0;
};

// The line for `record` (no newline).
std::string FormatAccessRecord(const AccessRecord& record, AccessLogFormat format);

// Records of the requests in flight, keyed by an address unique while the request lives (its
// httplib::Request), so a handler and the logger that runs after the response meet. Thread-safe.
class AccessLog {
 public:
  AccessLog(AccessLogFormat format, std::FILE* out) : format_(format), out_(out) {}

  bool enabled() const { return format_ != AccessLogFormat::kOff; }
  // A request begins (pre-routing): its clock starts.
  void Begin(const void* key) EXCLUDES(mu_);
  // The handler's record to fill; null when logging is off. Shared so a stream that outlives
  // its handler keeps filling it.
  std::shared_ptr<AccessRecord> Record(const void* key) EXCLUDES(mu_);
  // Writes the line: the response's status, the duration since Begin. Status 0 forgets the
  // request without a line.
  void End(const void* key, const std::string& remote, const std::string& method,
           const std::string& path, int status) EXCLUDES(mu_);

 private:
  struct Entry {
    Clock::time_point start;
    std::shared_ptr<AccessRecord> record;
  };
  const AccessLogFormat format_;
  std::FILE* const out_;
  Mutex mu_;
  std::unordered_map<const void*, Entry> entries_ GUARDED_BY(mu_);
};

}  // namespace moex::serve
