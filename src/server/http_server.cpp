#include "http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "omni/server/api_error.h"
#include "request_head.h"

namespace omni::server {

namespace {

using Clock = std::chrono::steady_clock;

// Connections past the cap are answered from a reserve of pool threads; each
// refusal holds one for at most 150 ms (refuse), so a flood of refused
// connections drains at about 100 a second even when none of them sends.
constexpr std::size_t kReserveThreads = 16;

thread_local Connection* t_current = nullptr;

// Waits until `fd` has `events`, at most `timeout`; false on timeout or error.
bool wait_for(int fd, short events, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::max<long long>(left, 0)));
    if (r > 0) return true;
    if (r == 0 || errno != EINTR) return false;
  }
}

// Reads and discards what the client sends, for at most `timeout` and
// `max_bytes` or until it closes: closing a socket with unread input resets
// the connection, and the client may then lose the answer it was sent.
void discard_input(int fd, std::chrono::milliseconds timeout, std::size_t max_bytes = 1 << 20) {
  const auto deadline = Clock::now() + timeout;
  char buf[16384];
  std::size_t discarded = 0;
  while (Clock::now() < deadline && discarded < max_bytes) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!wait_for(fd, POLLIN, left)) return;
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return;
    if (n > 0) discarded += static_cast<std::size_t>(n);
  }
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int r = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                     : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (r != 0) return;
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    port = ntohs(a.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
    port = ntohs(a.sin6_port);
  }
  ip = text;
}

// Makes `connection` the calling thread's current one for its lifetime.
class CurrentConnection {
 public:
  explicit CurrentConnection(Connection& c) { t_current = &c; }
  ~CurrentConnection() { t_current = nullptr; }
  CurrentConnection(const CurrentConnection&) = delete;
  CurrentConnection& operator=(const CurrentConnection&) = delete;
};

// An error answer written outside httplib (it has no request to answer);
// the connection closes after it.
void send_error(int fd, const std::string& status, const nlohmann::json& body,
                const std::string& extra_headers = {}) {
  const std::string text = body.dump();
  const std::string response =
      "HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\n" + extra_headers +
      "Connection: close\r\nContent-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;
  if (wait_for(fd, POLLOUT, std::chrono::milliseconds(1000))) {
    [[maybe_unused]] const auto sent =
        ::send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

// The status line of an answer HttpServer writes itself.
std::string status_line(ErrorKind kind) {
  const int status = http_status(kind);
  const char* reason = "Error";
  switch (status) {
    case 400:
      reason = "Bad Request";
      break;
    case 408:
      reason = "Request Timeout";
      break;
    case 414:
      reason = "URI Too Long";
      break;
    case 431:
      reason = "Request Header Fields Too Large";
      break;
    case 505:
      reason = "HTTP Version Not Supported";
      break;
  }
  return std::to_string(status) + " " + reason;
}

}  // namespace

// Note [Chunk sizes]
// httplib reads a chunk-size line with strtoul, which takes leading blanks,
// a sign and a "0x": "-5" became 2^64-5 and the body was waited for until
// --receive-timeout, while "zz" was refused at once. Once a handler reads a
// chunked body (Connection::expect_chunked_body), the bytes pass through
// ChunkFraming, which holds each size line to RFC 9112 (1*HEXDIG, then
// blanks, a ';' extension or the line's end) and fails the read at its first
// wrong byte: the body is then 400 at once. httplib asks the stream for just
// the bytes it parses (its line reader one at a time, a chunk's data up to
// its end), so ChunkFraming sees the body as httplib does. After the last
// (zero) chunk, httplib checks the rest itself.
// (Outside the anonymous namespace: RequestStream holds one.)
class ChunkFraming {
 public:
  // False at the first byte that breaks the framing.
  bool take(const char* data, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const char c = data[i];
      switch (state_) {
        case State::size_start:
          if (hex_value(c) < 0) return false;
          size_ = static_cast<std::uint64_t>(hex_value(c));
          state_ = State::size;
          break;
        case State::size:
          if (hex_value(c) >= 0) {
            // Far past any --max-body; strtoul would saturate.
            if (size_ > (std::uint64_t{1} << 56)) return false;
            size_ = size_ * 16 + static_cast<std::uint64_t>(hex_value(c));
            break;
          }
          [[fallthrough]];
        case State::size_blank:
          if (c == ' ' || c == '\t') {
            state_ = State::size_blank;
          } else if (c == ';') {
            state_ = State::extension;
          } else if (c == '\r') {
            state_ = State::size_cr;
          } else if (c == '\n') {
            end_size_line();
          } else {
            return false;
          }
          break;
        case State::extension:
          if (c == '\n') end_size_line();
          break;
        case State::size_cr:
          if (c != '\n') return false;
          end_size_line();
          break;
        case State::data: {
          const auto k = std::min<std::uint64_t>(size_, n - i);
          size_ -= k;
          i += static_cast<std::size_t>(k) - 1;
          if (size_ == 0) state_ = State::data_end;
          break;
        }
        case State::data_end:  // the CRLF after a chunk's data: httplib checks it
          if (c == '\n') state_ = State::size_start;
          break;
        case State::done:
          return true;
      }
    }
    return true;
  }

 private:
  enum class State { size_start, size, size_blank, extension, size_cr, data, data_end, done };

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  void end_size_line() { state_ = size_ == 0 ? State::done : State::data; }

  State state_ = State::size_start;
  std::uint64_t size_ = 0;
};

// One request's view of the socket: reads end at the receive deadline and
// after max_request_bytes (Note [Hostile connections]); its head is received
// into the connection's buffer first (receive_head), and httplib reads that
// buffer before the socket.
class RequestStream final : public httplib::Stream {
 public:
  RequestStream(Connection& connection, const ConnectionLimits& limits)
      : connection_(connection),
        deadline_(Clock::now() + limits.receive_timeout),
        budget_(limits.max_request_bytes),
        write_timeout_(limits.write_timeout) {
    connection_.chunked_body_ = false;
    connection_.chunk_size_malformed_ = false;
  }

  // Receives the request's head into the connection's buffer and checks it as
  // it arrives (Note [Request head]). Complete: httplib may parse it. Refused:
  // `scanner` says why. Reading: the deadline passed (Connection::timed_out)
  // or the client closed or reset the connection.
  HeadScanner::State receive_head(HeadScanner& scanner) {
    auto& buffer = connection_.received_;
    buffer.erase(0, connection_.taken_);  // what the previous request left: a pipelined one
    connection_.taken_ = 0;
    for (;;) {
      const auto state = scanner.scan(buffer);
      if (state == HeadScanner::State::complete) connection_.taken_ = scanner.begin();
      if (state != HeadScanner::State::reading) return state;
      if (budget_ == 0) return state;
      if (!wait_readable()) {
        connection_.timed_out_ = true;
        return state;
      }
      const auto old_size = buffer.size();
      const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(kHeadRead, budget_));
      buffer.resize(old_size + want);
      ssize_t n;
      do {
        n = ::recv(fd(), buffer.data() + old_size, want, MSG_DONTWAIT);
      } while (n < 0 && errno == EINTR);
      buffer.resize(old_size + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return state;
      if (n > 0) budget_ -= static_cast<std::uint64_t>(n);
    }
  }

  bool is_readable() const override { return connection_.buffered() || wait_readable(); }
  bool is_writable() const override { return wait_for(fd(), POLLOUT, write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    const ssize_t n = connection_.buffered() ? take_buffered(ptr, size) : receive(ptr, size);
    if (n > 0 && connection_.chunked_body_ && !chunk_framing_.take(ptr, static_cast<size_t>(n))) {
      connection_.chunk_size_malformed_ = true;
      return refuse_read();
    }
    return n;
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!wait_for(fd(), POLLOUT, write_timeout_)) return -1;
    for (;;) {
      const ssize_t n = ::send(fd(), ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      wrote_ = wrote_ || n > 0;
      return n;
    }
  }
  // Whether any of a response went out.
  bool wrote() const { return wrote_; }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address_of(fd(), true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address_of(fd(), false, ip, port);
  }
  socket_t socket() const override { return fd(); }

 private:
  // Bytes per recv() while a head is received: a head rarely needs two.
  static constexpr std::size_t kHeadRead = 16 << 10;

  int fd() const { return connection_.fd(); }
  std::chrono::milliseconds receive_time_left() const {
    return std::max(
        std::chrono::milliseconds(0),
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()));
  }
  // A poll with no time left still reports waiting bytes, so the deadline is
  // checked first: a client that never stops sending meets it too.
  bool wait_readable() const {
    return Clock::now() < deadline_ && wait_for(fd(), POLLIN, receive_time_left());
  }
  ssize_t take_buffered(char* ptr, size_t size) {
    auto& c = connection_;
    const auto n = std::min(size, c.received_.size() - c.taken_);
    std::memcpy(ptr, c.received_.data() + c.taken_, n);
    c.taken_ += n;
    if (!c.buffered()) {  // an idle connection holds no buffer
      c.received_.clear();
      c.received_.shrink_to_fit();
      c.taken_ = 0;
    }
    return static_cast<ssize_t>(n);
  }
  ssize_t receive(char* ptr, size_t size) {
    if (budget_ == 0) return refuse_read();
    if (!wait_readable()) {
      connection_.timed_out_ = true;
      return refuse_read();
    }
    for (;;) {
      const ssize_t n = ::recv(
          fd(), ptr, static_cast<size_t>(std::min<std::uint64_t>(size, budget_)), MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) budget_ -= static_cast<std::uint64_t>(n);
      return n;
    }
  }
  // Whatever the request was, what is left of it must not be read as the next one.
  ssize_t refuse_read() {
    connection_.close_after_response();
    return -1;
  }

  Connection& connection_;
  const Clock::time_point deadline_;
  std::uint64_t budget_;
  const std::chrono::milliseconds write_timeout_;
  bool wrote_ = false;
  ChunkFraming chunk_framing_;  // used once connection_.chunked_body_ is set
};

Connection* Connection::current() {
  return t_current;
}

bool Connection::peer_gone() const {
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

HttpServer::HttpServer(ConnectionLimits limits) : limits_(limits) {}

std::size_t HttpServer::pool_threads() const {
  return limits_.max_connections + kReserveThreads;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  std::size_t open = open_.load();
  while (open < limits_.max_connections && !open_.compare_exchange_weak(open, open + 1)) {
  }
  const bool admitted = open < limits_.max_connections;
  try {
    if (admitted) {
      serve(sock);
    } else {
      ++refused_;
      refuse(sock);
    }
  } catch (...) {
    // httplib's pool would terminate the process; the connection just ends.
  }
  if (admitted) --open_;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return true;
}

bool HttpServer::wait_for_request(const Connection& connection) const {
  if (connection.buffered()) return svr_sock_ != INVALID_SOCKET;  // pipelined
  // In slices, so that a stopping server ends idle connections.
  const auto idle_until = Clock::now() + limits_.keep_alive_timeout;
  bool ready = false;
  while (!ready && svr_sock_ != INVALID_SOCKET && Clock::now() < idle_until)
    ready = wait_for(
        connection.fd(), POLLIN,
        std::min(std::chrono::milliseconds(100),
                 std::chrono::duration_cast<std::chrono::milliseconds>(idle_until - Clock::now())));
  return ready && svr_sock_ != INVALID_SOCKET;
}

void HttpServer::serve(socket_t sock) {
  Connection connection(sock);
  CurrentConnection current(connection);
  for (std::size_t left = keep_alive_max_count_; left > 0; --left) {
    if (!wait_for_request(connection)) return;
    RequestStream stream(connection, limits_);
    HeadScanner head;
    const auto state = stream.receive_head(head);
    if (state == HeadScanner::State::refused) {
      const auto& why = head.refusal();
      send_error(sock, status_line(why.kind), error_body(why.kind, why.code, why.message));
      connection.close_after_response();
    }
    bool written = false;
    bool connection_closed = false;
    if (state == HeadScanner::State::complete)
      written = process_request(stream, left == 1, connection_closed, nullptr);
    // httplib answers nothing when the request line itself did not arrive.
    if (connection.timed_out() && !stream.wrote())
      send_error(sock, "408 Request Timeout",
                 error_body(ErrorKind::timed_out, "request_timeout",
                            "the request did not arrive in time (--receive-timeout)"));
    if (connection.closing()) {
      // A body was left unread: let the answer reach the client before the close.
      ::shutdown(sock, SHUT_WR);
      discard_input(sock, std::chrono::milliseconds(500), 4 << 20);
      return;
    }
    if (!written || connection_closed) return;
  }
}

void HttpServer::refuse(socket_t sock) const {
  discard_input(sock, std::chrono::milliseconds(50));  // the request, if it comes at once
  send_error(sock, "503 Service Unavailable",
             error_body(ErrorKind::overloaded, "too_many_connections",
                        "the server has too many open connections (--max-connections); retry "
                        "later"),
             "Retry-After: 1\r\n");
  ::shutdown(sock, SHUT_WR);
  discard_input(sock, std::chrono::milliseconds(100));
}

}  // namespace omni::server
