// Errors the HTTP API reports to a client, as OpenAI does: a status code and a JSON body
// {"error": {"message", "type", "param", "code"}}. Every bad request becomes one of these,
// never a crash; the server keeps serving.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace moex::serve {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "")
      : std::runtime_error(message),
        status_(status),
        param_(std::move(param)),
        code_(std::move(code)),
        type_(type.empty() ? DefaultType(status) : std::move(type)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  const std::string& type() const { return type_; }

  // The OpenAI error body.
  nlohmann::json Body() const { return ErrorBody(status_, what(), param_, code_, type_); }

  static nlohmann::json ErrorBody(int status, const std::string& message,
                                  const std::string& param = "", const std::string& code = "",
                                  const std::string& type = "") {
    auto or_null = [](const std::string& s) {
      return s.empty() ? nlohmann::json() : nlohmann::json(s);
    };
    return {{"error",
             {{"message", message},
              {"type", type.empty() ? DefaultType(status) : type},
              {"param", or_null(param)},
              {"code", or_null(code)}}}};
  }

  // OpenAI's error types by status.
  static std::string DefaultType(int status) {
    switch (status) {
      case 401:
        return "authentication_error";
      case 404:
        return "not_found_error";
      case 429:
        return "rate_limit_error";
      default:
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
  }

 private:
  int status_;
  std::string param_;
  std::string code_;
  std::string type_;
};

// The HTTP status of a request that ended without an answer, from the scheduler's finish
// reason: 504 timeout, 503 shutdown, 500 error; 0 for stop, length and cancelled.
inline int FailedStatus(const std::string& finish_reason) {
  if (finish_reason == "timeout") return 504;
  if (finish_reason == "shutdown") return 503;
  if (finish_reason == "error") return 500;
  return 0;
}

}  // namespace moex::serve
