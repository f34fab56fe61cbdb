// HeadScanner: finds one request's head (its request line and header fields)
// in the bytes a connection received and holds it to RFC 9112 and to the
// head limits, before httplib parses a byte of it (private to src/server).
//
// Note [Request head]
// httplib 0.11 cannot bound a request's head. Its read_headers (compiled
// into Debian's libcpp-httplib.so, so its CPPHTTPLIB_* limits cannot be
// changed from here) reads a line at a time, one recv() per byte, with no
// limit on the number of lines; it stores each into the request's multimap
// before any hook of ours runs (setup_request and the pre-routing handler see
// the finished request). A flood of `X: v` lines therefore cost 3–10 MB per
// connection and the CPU of a recv per byte, and glibc kept most of that
// memory after the connection closed (issue 34, D2). Its parser is lenient
// where RFC 9112 asks for a 400: `Content-Length : 0` becomes a field named
// "Content-Length " (so a body is framed differently by us and by a proxy),
// a folded line or a line without a colon is skipped, a missing or second
// Host goes unnoticed (D7).
//
// So HttpServer receives the head itself, in 16 KiB reads into a buffer the
// connection owns (at most max_bytes plus one read), and HeadScanner checks
// each line as it completes. Only a head that passed is handed to httplib,
// which then parses it from that buffer, with no system call per byte; the
// bytes that came after the head (a body, a pipelined request) stay in the
// buffer for it. A refused head is answered by HttpServer and its connection
// closes, since where the next request would start is unknown:
// - more than max_bytes before the empty line that ends the head, or more
//   than max_fields field lines: 431;
// - a field line longer than max_line: 431; a request line longer: 414
//   (httplib's own line limit, so what passed here also passes there);
// - a request line that is not `method SP request-target SP HTTP/d.d`: 400;
//   a version other than HTTP/1.0 and HTTP/1.1: 505;
// - a line not ended by CRLF, a CR or another control character inside a
//   line, a field line starting with SP or HTAB (obsolete line folding), a
//   field name that is not a token or is followed by whitespace before its
//   colon: 400;
// - an HTTP/1.1 request without exactly one Host, any request with two, or
//   a Host value that cannot be an authority: 400.
// Empty lines before the request line are skipped (RFC 9112 section 2.2);
// they count against max_bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "omni/server/api_error.h"

namespace omni::server {

struct HeadLimits {
  std::size_t max_bytes = 64 << 10;  // request line, fields and the empty line
  std::size_t max_fields = 100;
  std::size_t max_line = 8 << 10;  // one line with its CRLF
};

// Why a head was refused, for its error body (HttpServer answers it).
struct HeadRefusal {
  ErrorKind kind = ErrorKind::malformed;
  std::string code;
  std::string message;
};

class HeadScanner {
 public:
  enum class State { reading, complete, refused };

  explicit HeadScanner(HeadLimits limits = {}) : limits_(limits) {}

  // Scans what `received` (every byte of this request so far, from its first)
  // holds past what the previous call saw. Not thread-safe; one per request.
  State scan(std::string_view received);

  State state() const { return state_; }
  // Once complete: the head is received[begin(), end()), its empty line
  // included; what precedes begin() is empty lines.
  std::size_t begin() const { return head_begin_; }
  std::size_t end() const { return head_end_; }
  // Once refused: why.
  const HeadRefusal& refusal() const { return refusal_; }

 private:
  State check_line(std::string_view line, std::size_t next);
  State check_request_line(std::string_view line);
  State check_field_line(std::string_view line);
  State check_host(std::string_view value);
  State finish(std::size_t next);
  State refuse(ErrorKind kind, std::string code, std::string message);

  const HeadLimits limits_;
  State state_ = State::reading;
  std::size_t scanned_ = 0;     // bytes already looked at
  std::size_t line_start_ = 0;  // where the line being received starts
  std::size_t head_begin_ = 0;
  std::size_t head_end_ = 0;
  bool request_line_seen_ = false;
  bool http_1_1_ = false;
  std::size_t fields_ = 0;
  std::size_t hosts_ = 0;
  HeadRefusal refusal_;
};

}  // namespace omni::server
