// Unit tests of the request head checks (Note [Request head], request_head.h).
#include "server/request_head.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace omni::server {
namespace {

using State = HeadScanner::State;

// Scans `bytes` in one go; the scanner's verdict.
HeadScanner scanned(const std::string& bytes, HeadLimits limits = {}) {
  HeadScanner scanner(limits);
  scanner.scan(bytes);
  return scanner;
}

std::string head(const std::string& fields) {
  return "GET /health HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n" + fields + "\r\n";
}

TEST(RequestHead, AWellFormedHeadIsComplete) {
  const std::string body = "{}";
  const std::string bytes =
      "POST /v1/videos HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nX-Empty:\r\n"
      "X-Tab:\tv\t\r\n\r\n" +
      body;
  const auto s = scanned(bytes);
  ASSERT_EQ(s.state(), State::complete) << s.refusal().message;
  EXPECT_EQ(s.begin(), 0u);
  EXPECT_EQ(s.end(), bytes.size() - body.size());
}

TEST(RequestHead, ArrivesInPieces) {
  const std::string bytes = head("X-A: a\r\n");
  HeadScanner scanner;
  for (std::size_t n = 1; n < bytes.size(); ++n)
    ASSERT_EQ(scanner.scan(std::string_view(bytes).substr(0, n)), State::reading) << n;
  EXPECT_EQ(scanner.scan(bytes), State::complete);
  EXPECT_EQ(scanner.end(), bytes.size());
}

TEST(RequestHead, LeadingEmptyLinesAreSkipped) {
  const auto s = scanned("\r\n\r\n" + head(""));
  ASSERT_EQ(s.state(), State::complete) << s.refusal().message;
  EXPECT_EQ(s.begin(), 4u);
}

TEST(RequestHead, HttpOneZeroNeedsNoHost) {
  EXPECT_EQ(scanned("GET / HTTP/1.0\r\n\r\n").state(), State::complete);
}

// Issue 34 (D7): each of these was accepted.
TEST(RequestHead, FramingMistakesAre400) {
  for (const std::string& bytes : std::vector<std::string>{
           std::string("GARBAGE\r\n\r\n"),
           std::string("GET  /health HTTP/1.1\r\nHost: x\r\n\r\n"),
           std::string("GET /health HTTP/1.1 \r\nHost: x\r\n\r\n"),
           std::string("GET /health HTTP/1.x\r\nHost: x\r\n\r\n"),
           std::string("G(T /health HTTP/1.1\r\nHost: x\r\n\r\n"),
           head("Content-Length : 0\r\n"),  // whitespace before the colon
           head("Content-Length\t: 0\r\n"),
           head("X-A: a\r\n b\r\n"),  // obsolete line folding
           head("X-A: a\r\n\tb\r\n"),
           head("NoColon\r\n"),
           head(": empty name\r\n"),
           head("X-A: a\rb\r\n"),       // a bare CR
           head("X-A: a\r\nX-B: b\n"),  // a bare LF
           head(std::string("X-A: a") + '\0' + "b\r\n"),
           "GET /health HTTP/1.1\r\n\r\n",               // no Host
           head("Host: y\r\n"),                          // two
           head("host: 127.0.0.1:8080\r\n"),             // two, in any case
           "GET /health HTTP/1.1\r\nHost: a b\r\n\r\n",  // not an authority
           "GET /health HTTP/1.1\r\nHost: user@host\r\n\r\n",
           "GET /health HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",  // two, whatever the version
       }) {
    SCOPED_TRACE(bytes);
    const auto s = scanned(bytes);
    EXPECT_EQ(s.state(), State::refused);
    EXPECT_EQ(s.refusal().kind, ErrorKind::malformed) << s.refusal().code;
  }
}

TEST(RequestHead, OtherVersionsAre505) {
  const auto s = scanned("GET / HTTP/2.0\r\nHost: x\r\n\r\n");
  EXPECT_EQ(s.state(), State::refused);
  EXPECT_EQ(s.refusal().kind, ErrorKind::version_not_supported);
}

TEST(RequestHead, AHeaderFloodIsRefusedAtTheFieldLimit) {
  std::string bytes = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 99; ++i) bytes += "X: v\r\n";
  EXPECT_EQ(scanned(bytes + "\r\n").state(), State::complete);  // 100 fields
  bytes += "X: v\r\n";                                          // the 101st
  const auto s = scanned(bytes);
  EXPECT_EQ(s.state(), State::refused);
  EXPECT_EQ(s.refusal().kind, ErrorKind::header_too_large);
  EXPECT_EQ(http_status(s.refusal().kind), 431);
}

TEST(RequestHead, AHeadOverTheByteLimitIsRefusedBeforeItEnds) {
  std::string bytes = "GET /health HTTP/1.1\r\nHost: x\r\n";
  const std::string field = "X-Big: " + std::string(8000, 'v') + "\r\n";
  while (bytes.size() + field.size() + 2 <= (64u << 10)) bytes += field;
  EXPECT_EQ(scanned(bytes + "\r\n").state(), State::complete);  // just under 64 KiB
  bytes += field;                                               // past 64 KiB, with no end in sight
  const auto s = scanned(bytes);
  EXPECT_EQ(s.state(), State::refused);
  EXPECT_EQ(s.refusal().kind, ErrorKind::header_too_large);
}

TEST(RequestHead, LongLinesAreRefusedBeforeTheyEnd) {
  const auto field = scanned("GET / HTTP/1.1\r\nHost: x\r\nX: " + std::string(9000, 'v'));
  EXPECT_EQ(field.state(), State::refused);
  EXPECT_EQ(field.refusal().kind, ErrorKind::header_too_large);
  const auto target = scanned("GET /" + std::string(9000, 'a'));
  EXPECT_EQ(target.state(), State::refused);
  EXPECT_EQ(target.refusal().kind, ErrorKind::uri_too_long);
}

}  // namespace
}  // namespace omni::server
