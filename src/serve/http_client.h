// A minimal blocking HTTP/1.1 client for moex's own API, used by the load generator
// (bench/serve_load.cc) and the tests: it sees each server-sent event as it arrives (for TTFT
// and TPOT) and can hang up in the middle of a stream (to test cancellation), which
// cpp-httplib's client cannot.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace moex::serve {

struct HttpResult {
  int status = 0;                   // 0: no response (connection failed; see error).
  std::string body;                 // The whole body (also for event streams).
  std::vector<std::string> events;  // `data:` payloads of an event stream, in order.
  std::string error;
  std::string head;  // The status line and headers, as received.

  // The value of header `name` (case-insensitive), or "" when absent.
  std::string Header(const std::string& name) const;
};

// Called with each event's data as it arrives; return false to hang up.
using EventHandler = std::function<bool(const std::string& data)>;

// Sends one request (Connection: close) and reads the response. `headers` are extra lines
// such as "Authorization: Bearer k". Timeouts in seconds apply to each read.
HttpResult HttpRequest(const std::string& host, int port, const std::string& method,
                       const std::string& path, const std::string& body,
                       const std::vector<std::string>& headers = {},
                       const EventHandler& on_event = {}, double timeout_s = 120);

}  // namespace moex::serve
