// Test helpers: the real `omni serve` binary in a child process, an HTTP
// client for it, and small readers for what it returns (base64, MP4 boxes,
// Prometheus samples).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace omni::server::testing {

using namespace std::chrono_literals;

// `omni serve example:wan-shaped --enable-cpu-offload --device sim --port 0 <extra>`,
// started in the constructor (which waits for the port it prints) and killed
// in the destructor if it still runs.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& extra = {},
                         std::chrono::seconds startup_timeout = 120s) {
    ::signal(SIGPIPE, SIG_IGN);  // a write to a closed connection must fail, not kill the test
    std::vector<std::string> args = {OMNI_BINARY,
                                     "serve",
                                     "example:wan-shaped",
                                     "--enable-cpu-offload",
                                     "--device",
                                     "sim",
                                     "--port",
                                     "0",
                                     "--omni"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    char stderr_template[] = "/tmp/omni-serve-test-XXXXXX";
    const int err_fd = ::mkstemp(stderr_template);
    if (err_fd < 0) throw std::runtime_error("mkstemp failed");
    stderr_path_ = stderr_template;
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe failed");

    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {  // child: only async-signal-safe calls until exec
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err_fd, STDERR_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      ::close(err_fd);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err_fd);
    stdout_fd_ = out[0];
    port_ = wait_for_port(startup_timeout);
  }

  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (stdout_fd_ >= 0) ::close(stdout_fd_);
    if (!stderr_path_.empty()) ::unlink(stderr_path_.c_str());
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }

  std::unique_ptr<httplib::Client> client(std::chrono::seconds read_timeout = 120s) const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_connection_timeout(10, 0);
    c->set_read_timeout(read_timeout);
    c->set_write_timeout(30, 0);
    return c;
  }

  // Sends `sig` and waits for the exit; the exit status, or nullopt when it
  // did not exit normally within `timeout` (then it is killed).
  std::optional<int> signal_and_wait(int sig, std::chrono::seconds timeout = 60s) {
    ::kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        if (WIFEXITED(status)) return WEXITSTATUS(status);
        return std::nullopt;
      }
      std::this_thread::sleep_for(20ms);
    }
    return std::nullopt;
  }

  std::string stderr_text() const {
    std::ifstream in(stderr_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // Resident set size of the server, from /proc/PID/status (VmRSS).
  std::uint64_t rss_bytes() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    return 0;
  }

 private:
  int wait_for_port(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    std::string text;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{stdout_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char buf[512];
        const ssize_t n = ::read(stdout_fd_, buf, sizeof buf);
        if (n <= 0) break;  // the child closed stdout: it exited
        text.append(buf, static_cast<std::size_t>(n));
        std::smatch m;
        if (std::regex_search(text, m, listening)) return std::stoi(m[1]);
      }
    }
    throw std::runtime_error("omni serve did not print its port; stdout: " + text +
                             "\nstderr: " + stderr_text());
  }

  pid_t pid_ = -1;
  bool exited_ = false;
  int stdout_fd_ = -1;
  int port_ = 0;
  std::string stderr_path_;
};

// A raw TCP connection to the server, for what httplib's client will not
// send: slow or partial requests, chunked bodies of any size, bad framing.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("cannot connect to port " + std::to_string(port));
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // Whether all of `bytes` went out (false once the server closed or reset).
  bool send(const std::string& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, 5000) <= 0) return false;
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }
  // Whatever arrives within `timeout` (until the server closes, or the
  // head and Content-Length body of one response are in).
  std::string receive(std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline && !response_complete()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      received_.append(buf, static_cast<std::size_t>(n));
    }
    return received_;
  }
  // Waits until the server closes the connection; whether it did within `timeout`.
  bool wait_closed(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!closed_ && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0)
        closed_ = true;
      else
        received_.append(buf, static_cast<std::size_t>(n));
    }
    return closed_;
  }
  void close() {
    ::close(fd_);
    fd_ = -1;
  }
  const std::string& received() const { return received_; }
  // The status code of the response received so far, or 0.
  int status() const {
    return received_.rfind("HTTP/1.1 ", 0) == 0 && received_.size() >= 12
               ? std::atoi(received_.substr(9, 3).c_str())
               : 0;
  }

 private:
  bool response_complete() const {
    const auto head_end = received_.find("\r\n\r\n");
    if (head_end == std::string::npos) return false;
    const std::regex length(R"(Content-Length: (\d+))", std::regex::icase);
    std::smatch m;
    const std::string head = received_.substr(0, head_end);
    if (!std::regex_search(head, m, length)) return true;
    return received_.size() >= head_end + 4 + std::stoul(m[1]);
  }

  int fd_ = -1;
  bool closed_ = false;
  std::string received_;
};

inline std::string base64_decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  std::uint32_t buffer = 0;
  int bits = 0;
  for (const char c : in) {
    const int v = value(c);
    if (v < 0) continue;  // '=' padding
    buffer = (buffer << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  return out;
}

// What a few MP4 boxes say: the first box's type, the video track's tkhd
// width and height and its stsz sample (frame) count.
struct Mp4Info {
  std::string first_box;
  int width = 0;
  int height = 0;
  std::uint32_t samples = 0;
};

inline Mp4Info inspect_mp4(const std::string& bytes) {
  Mp4Info info;
  auto be32 = [&](std::size_t at) -> std::uint32_t {
    if (at + 4 > bytes.size()) return 0;
    return (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at])) << 24) |
           (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + 1])) << 16) |
           (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + 2])) << 8) |
           static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + 3]));
  };
  // Walks [begin, end), descending into containers.
  std::function<void(std::size_t, std::size_t, bool&)> walk = [&](std::size_t begin,
                                                                  std::size_t end, bool& video) {
    std::size_t at = begin;
    while (at + 8 <= end) {
      std::uint64_t size = be32(at);
      const std::string type = bytes.substr(at + 4, 4);
      std::size_t header = 8;
      if (size == 1) {
        size = (static_cast<std::uint64_t>(be32(at + 8)) << 32) | be32(at + 12);
        header = 16;
      } else if (size == 0) {
        size = end - at;
      }
      if (size < header || at + size > end) return;
      if (info.first_box.empty()) info.first_box = type;
      const std::size_t body = at + header, box_end = at + static_cast<std::size_t>(size);
      if (type == "moov" || type == "mdia" || type == "minf" || type == "stbl") {
        walk(body, box_end, video);
      } else if (type == "trak") {
        bool is_video = false;
        walk(body, box_end, is_video);
      } else if (type == "hdlr") {
        video = bytes.substr(body + 8, 4) == "vide";
      } else if (type == "tkhd") {
        info.width = static_cast<int>(be32(box_end - 8) >> 16);
        info.height = static_cast<int>(be32(box_end - 4) >> 16);
      } else if (type == "stsz" && video) {
        info.samples = be32(body + 8);
      }
      at = box_end;
    }
  };
  bool video = false;
  walk(0, bytes.size(), video);
  return info;
}

// The value of one Prometheus sample line `name{labels} value` (labels
// exactly as rendered), or nullopt.
inline std::optional<double> metric(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return std::nullopt;
}

}  // namespace omni::server::testing
