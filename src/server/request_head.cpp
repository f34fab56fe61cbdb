#include "request_head.h"

#include <strings.h>

#include <algorithm>
#include <cctype>

#include "omni/error.h"

namespace omni::server {

namespace {

bool is_blank(char c) {
  return c == ' ' || c == '\t';
}

// RFC 9110 tchar: the characters of a token (a method, a field name).
bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

// A field value's characters: HTAB, SP, VCHAR, obs-text (RFC 9110 section 5.5).
bool is_field_value_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return c == '\t' || (u >= 0x20 && u != 0x7f);
}

// What a Host value (uri-host [":" port], RFC 3986) may hold: unreserved,
// pct-encoded, sub-delims, the port's colon and an IP literal's brackets.
bool is_authority_char(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("-._~%!$&'()*+,;=:[]").find(c) != std::string_view::npos;
}

std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

HeadScanner::State HeadScanner::scan(std::string_view received) {
  while (state_ == State::reading && scanned_ < received.size()) {
    const auto lf = received.find('\n', scanned_);
    if (lf == std::string_view::npos) {
      scanned_ = received.size();
      break;
    }
    scanned_ = lf + 1;
    const auto line = received.substr(line_start_, lf + 1 - line_start_);
    line_start_ = lf + 1;
    check_line(line, lf + 1);
  }
  if (state_ != State::reading) return state_;
  // What has not completed yet must still be able to fit.
  if (received.size() > limits_.max_bytes)
    return refuse(
        ErrorKind::header_too_large, "request_header_fields_too_large",
        detail::concat("the request line and headers exceed ", limits_.max_bytes, " bytes"));
  if (received.size() - line_start_ > limits_.max_line)
    return request_line_seen_
               ? refuse(ErrorKind::header_too_large, "request_header_fields_too_large",
                        detail::concat("a header line exceeds ", limits_.max_line, " bytes"))
               : refuse(ErrorKind::uri_too_long, "uri_too_long",
                        detail::concat("the request line exceeds ", limits_.max_line, " bytes"));
  return state_;
}

// `line` ends with its LF; `next` is where the following line starts.
HeadScanner::State HeadScanner::check_line(std::string_view line, std::size_t next) {
  if (line.size() < 2 || line[line.size() - 2] != '\r')
    return refuse(ErrorKind::malformed, "invalid_line_ending",
                  "every line of the request head must end with CRLF");
  const auto content = line.substr(0, line.size() - 2);
  if (!request_line_seen_) {
    if (content.empty()) {  // an empty line before the request line is skipped
      head_begin_ = next;
      return state_;
    }
    if (line.size() > limits_.max_line)
      return refuse(ErrorKind::uri_too_long, "uri_too_long",
                    detail::concat("the request line exceeds ", limits_.max_line, " bytes"));
    return check_request_line(content);
  }
  if (content.empty()) return finish(next);
  if (line.size() > limits_.max_line)
    return refuse(ErrorKind::header_too_large, "request_header_fields_too_large",
                  detail::concat("a header line exceeds ", limits_.max_line, " bytes"));
  if (++fields_ > limits_.max_fields)
    return refuse(
        ErrorKind::header_too_large, "request_header_fields_too_large",
        detail::concat("the request has more than ", limits_.max_fields, " header fields"));
  return check_field_line(content);
}

HeadScanner::State HeadScanner::check_request_line(std::string_view line) {
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return refuse(ErrorKind::malformed, "invalid_request_line",
                  "the request line must be: method, one space, target, one space, version");
  const auto method = line.substr(0, sp1);
  const auto target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const auto version = line.substr(sp2 + 1);
  if (!is_token(method))
    return refuse(ErrorKind::malformed, "invalid_request_line", "the method is not a token");
  if (target.empty() || std::any_of(target.begin(), target.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u <= 0x20 || u == 0x7f;
      }))
    return refuse(ErrorKind::malformed, "invalid_request_line",
                  "the request target is empty or holds a control character");
  const bool syntax = version.size() == 8 && version.substr(0, 5) == "HTTP/" &&
                      std::isdigit(static_cast<unsigned char>(version[5])) && version[6] == '.' &&
                      std::isdigit(static_cast<unsigned char>(version[7]));
  if (!syntax)
    return refuse(ErrorKind::malformed, "invalid_request_line",
                  "the protocol version must be HTTP/<digit>.<digit>");
  if (version != "HTTP/1.1" && version != "HTTP/1.0")
    return refuse(ErrorKind::version_not_supported, "http_version_not_supported",
                  "only HTTP/1.0 and HTTP/1.1 are served");
  http_1_1_ = version == "HTTP/1.1";
  request_line_seen_ = true;
  return state_;
}

HeadScanner::State HeadScanner::check_field_line(std::string_view line) {
  if (is_blank(line.front()))
    return refuse(ErrorKind::malformed, "obsolete_line_folding",
                  "a header line starts with whitespace (obsolete line folding)");
  const auto colon = line.find(':');
  if (colon == std::string_view::npos)
    return refuse(ErrorKind::malformed, "invalid_header", "a header line has no colon");
  const auto name = line.substr(0, colon);
  if (!name.empty() && is_blank(name.back()))
    return refuse(ErrorKind::malformed, "invalid_header",
                  "whitespace between a header name and its colon");
  if (!is_token(name))
    return refuse(ErrorKind::malformed, "invalid_header", "a header name is not a token");
  const auto value = line.substr(colon + 1);
  if (!std::all_of(value.begin(), value.end(), is_field_value_char))
    return refuse(ErrorKind::malformed, "invalid_header",
                  "a header value holds a control character");
  if (name.size() == 4 && ::strncasecmp(name.data(), "host", 4) == 0)
    return check_host(trim_blanks(value));
  return state_;
}

HeadScanner::State HeadScanner::check_host(std::string_view value) {
  if (++hosts_ > 1)
    return refuse(ErrorKind::malformed, "invalid_host", "the request has more than one Host");
  if (!std::all_of(value.begin(), value.end(), is_authority_char))
    return refuse(ErrorKind::malformed, "invalid_host", "the Host value is not host[:port]");
  return state_;
}

HeadScanner::State HeadScanner::finish(std::size_t next) {
  if (next > limits_.max_bytes)
    return refuse(
        ErrorKind::header_too_large, "request_header_fields_too_large",
        detail::concat("the request line and headers exceed ", limits_.max_bytes, " bytes"));
  if (http_1_1_ && hosts_ == 0)
    return refuse(ErrorKind::malformed, "invalid_host", "an HTTP/1.1 request must have a Host");
  head_end_ = next;
  state_ = State::complete;
  return state_;
}

HeadScanner::State HeadScanner::refuse(ErrorKind kind, std::string code, std::string message) {
  refusal_ = HeadRefusal{kind, std::move(code), std::move(message)};
  state_ = State::refused;
  return state_;
}

}  // namespace omni::server
