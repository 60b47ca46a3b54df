#include "serve/http_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace moex::serve {

namespace {

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

int Connect(const std::string& host, int port, double timeout_s, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    error = "cannot resolve " + host;
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout_s);
    tv.tv_usec = static_cast<suseconds_t>((timeout_s - static_cast<double>(tv.tv_sec)) * 1e6);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(found);
  if (fd < 0) error = "cannot connect to " + host + ":" + std::to_string(port);
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Splits decoded body bytes into server-sent events.
class EventSplitter {
 public:
  EventSplitter(HttpResult& result, const EventHandler& handler)
      : result_(result), handler_(handler) {}
  // Returns false when the handler asked to hang up.
  bool Feed(const std::string& bytes) {
    pending_ += bytes;
    size_t end;
    while ((end = pending_.find("\n\n")) != std::string::npos) {
      const std::string event = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      std::string data;
      size_t start = 0;
      while (start <= event.size()) {
        size_t nl = event.find('\n', start);
        if (nl == std::string::npos) nl = event.size();
        const std::string line = event.substr(start, nl - start);
        if (line.rfind("data:", 0) == 0) {
          if (!data.empty()) data += "\n";
          data += line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
        }
        start = nl + 1;
      }
      result_.events.push_back(data);
      if (handler_ && !handler_(data)) return false;
    }
    return true;
  }

 private:
  HttpResult& result_;
  const EventHandler& handler_;
  std::string pending_;
};

}  // namespace

std::string HttpResult::Header(const std::string& name) const {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string key = lower(name) + ":";
  size_t start = 0;
  while (start < head.size()) {
    size_t end = head.find("\r\n", start);
    if (end == std::string::npos) end = head.size();
    const std::string line = head.substr(start, end - start);
    if (lower(line.substr(0, key.size())) == key) {
      const size_t value = line.find_first_not_of(' ', key.size());
      return value == std::string::npos ? "" : line.substr(value);
    }
    start = end + 2;
  }
  return "";
}

HttpResult HttpRequest(const std::string& host, int port, const std::string& method,
                       const std::string& path, const std::string& body,
                       const std::vector<std::string>& headers, const EventHandler& on_event,
                       double timeout_s) {
  HttpResult result;
  Socket socket(Connect(host, port, timeout_s, result.error));
  if (socket.fd() < 0) return result;
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: " + host + ":" +
                        std::to_string(port) + "\r\nConnection: close\r\n";
  for (const std::string& h : headers) request += h + "\r\n";
  if (!body.empty() || method == "POST")
    request +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  request += "\r\n" + body;
  if (!SendAll(socket.fd(), request)) {
    result.error = "send failed";
    return result;
  }

  std::string raw;
  char buffer[16384];
  auto read_more = [&] {
    ssize_t n;
    do {
      n = ::recv(socket.fd(), buffer, sizeof buffer, 0);
    } while (n < 0 && errno == EINTR);  // Signals in the calling process are no hang-up.
    if (n <= 0) return false;
    raw.append(buffer, static_cast<size_t>(n));
    return true;
  };
  size_t header_end;
  while ((header_end = raw.find("\r\n\r\n")) == std::string::npos)
    if (!read_more()) {
      result.error = "connection closed before the response headers";
      return result;
    }
  const std::string head = raw.substr(0, header_end);
  raw.erase(0, header_end + 4);
  if (head.size() < 12 || head.rfind("HTTP/1.", 0) != 0) {
    result.error = "not an HTTP response";
    return result;
  }
  result.status = std::atoi(head.c_str() + 9);
  result.head = head;
  std::string lower = head;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool chunked = lower.find("transfer-encoding: chunked") != std::string::npos;
  const bool sse = lower.find("content-type: text/event-stream") != std::string::npos;
  EventSplitter events(result, on_event);
  auto deliver = [&](const std::string& bytes) {
    result.body += bytes;
    return !sse || events.Feed(bytes);
  };

  if (!chunked) {
    const size_t at = lower.find("content-length:");
    const size_t length = at == std::string::npos
                              ? std::string::npos
                              : std::strtoull(lower.c_str() + at + 15, nullptr, 10);
    while (raw.size() < length && read_more()) {
    }
    deliver(length == std::string::npos ? raw : raw.substr(0, length));
    return result;
  }
  for (;;) {  // Chunked transfer coding: size line, data, CRLF; a zero size ends it.
    size_t line_end;
    while ((line_end = raw.find("\r\n")) == std::string::npos)
      if (!read_more()) {
        result.error = "connection closed inside a chunked body";
        return result;
      }
    const size_t size = std::strtoull(raw.c_str(), nullptr, 16);
    raw.erase(0, line_end + 2);
    if (size == 0) break;
    while (raw.size() < size + 2)
      if (!read_more()) {
        result.error = "connection closed inside a chunk";
        return result;
      }
    const std::string data = raw.substr(0, size);
    raw.erase(0, size + 2);
    if (!deliver(data)) return result;  // Hung up on request: the socket closes here.
  }
  return result;
}

}  // namespace moex::serve
