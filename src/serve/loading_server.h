// What `moex serve` listens with while the model loads (mapping it, packing its expert
// store, a policy learning from traces): /health answers 503 {"status": "loading",
// "progress": 0.42, "stage": "..."} from core/progress.h's latest report, and every other
// request gets OpenAI's error JSON with 503, so clients and orchestrators can wait on the
// port instead of meeting "connection refused". Stop() frees the port for the real server.
#pragma once

#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace moex::serve {

class LoadingServer {
 public:
  explicit LoadingServer(std::string host);
  ~LoadingServer();  // Stops it.

  // Binds `port` (0: any free port) and starts answering on a thread of its own; returns
  // the port. Throws Error when it cannot listen.
  int Start(int port);
  // Stops listening and joins the thread; the port is free when it returns.
  void Stop();

 private:
  std::string host_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
};

// /health's body while loading, from the latest progress report.
std::string LoadingHealthJson();

}  // namespace moex::serve
