#include "serve/loading_server.h"

#include <sys/socket.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/progress.h"
#include "serve/api_error.h"

namespace moex::serve {

std::string LoadingHealthJson() {
  const ProgressReport p = LatestProgress();
  nlohmann::json j = {{"status", "loading"}};
  if (p.total > 0) {
    j["progress"] = static_cast<double>(p.done) / static_cast<double>(p.total);
    j["stage"] = p.what;
  }
  return j.dump();
}

LoadingServer::LoadingServer(std::string host)
    : host_(std::move(host)), http_(std::make_unique<httplib::Server>()) {
  // As serve::Server: no SO_REUSEPORT, so a busy port is an error here too.
  http_->set_socket_options([](int sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http_->new_task_queue = [] { return new httplib::ThreadPool(4); };
  http_->Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.status = 503;
    res.set_header("Retry-After", "1");
    res.set_content(LoadingHealthJson(), "application/json");
  });
  // Everything else, whatever the method: the model is not there yet.
  auto loading = [](const httplib::Request&, httplib::Response& res) {
    res.status = 503;
    res.set_header("Retry-After", "1");
    res.set_content(ApiError::ErrorBody(503, "the model is loading; GET /health shows how far")
                        .dump(),
                    "application/json");
  };
  http_->Get(".*", loading);
  http_->Post(".*", loading);
}

LoadingServer::~LoadingServer() {
  Stop();
}

int LoadingServer::Start(int port) {
  if (port == 0) {
    port = http_->bind_to_any_port(host_);
    Check(port > 0, "cannot listen on ", host_, " (any port)");
  } else {
    Check(http_->bind_to_port(host_, port), "cannot listen on ", host_, ":", port,
          " (in use, or not an address of this machine)");
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  return port;
}

void LoadingServer::Stop() {
  if (!thread_.joinable()) return;
  // listen_after_bind may not have started its loop yet; stop() only stops a running one.
  for (int i = 0; i < 500 && !http_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  http_->stop();
  thread_.join();
}

}  // namespace moex::serve
