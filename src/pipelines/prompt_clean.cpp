// diffusers' prompt_clean (wan_video_stages.h): html.unescape and whitespace.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "omni/pipelines/wan_video_stages.h"

namespace omni::pipelines {

namespace {

bool is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// html.unescape for the entities prompts actually carry (named &amp; &lt;
// &gt; &quot; &apos; &nbsp; and numeric &#N; / &#xN;), as UTF-8.
std::string html_unescape(const std::string& text) {
  static const std::vector<std::pair<std::string, std::string>> named = {
      {"&amp;", "&"},   {"&lt;", "<"},   {"&gt;", ">"},
      {"&quot;", "\""}, {"&apos;", "'"}, {"&nbsp;", "\xC2\xA0"}};
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] != '&') {
      out += text[i++];
      continue;
    }
    bool replaced = false;
    for (const auto& [entity, value] : named) {
      if (text.compare(i, entity.size(), entity) == 0) {
        out += value;
        i += entity.size();
        replaced = true;
        break;
      }
    }
    if (!replaced && i + 2 < text.size() && text[i + 1] == '#') {
      const bool hex = text[i + 2] == 'x' || text[i + 2] == 'X';
      std::size_t j = i + (hex ? 3 : 2);
      std::uint32_t code = 0;
      std::size_t digits = 0;
      for (; j < text.size() && digits < 8; ++j, ++digits) {
        const char c = text[j];
        int v = -1;
        if (c >= '0' && c <= '9')
          v = c - '0';
        else if (hex && c >= 'a' && c <= 'f')
          v = c - 'a' + 10;
        else if (hex && c >= 'A' && c <= 'F')
          v = c - 'A' + 10;
        if (v < 0) break;
        code = code * (hex ? 16 : 10) + v;
      }
      if (digits > 0 && j < text.size() && text[j] == ';' && code > 0 && code <= 0x10FFFF &&
          !(code >= 0xD800 && code <= 0xDFFF)) {
        if (code < 0x80) {
          out += static_cast<char>(code);
        } else if (code < 0x800) {
          out += static_cast<char>(0xC0 | (code >> 6));
          out += static_cast<char>(0x80 | (code & 0x3F));
        } else if (code < 0x10000) {
          out += static_cast<char>(0xE0 | (code >> 12));
          out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
          out += static_cast<char>(0x80 | (code & 0x3F));
        } else {
          out += static_cast<char>(0xF0 | (code >> 18));
          out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
          out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
          out += static_cast<char>(0x80 | (code & 0x3F));
        }
        i = j + 1;
        replaced = true;
      }
    }
    if (!replaced) out += text[i++];
  }
  return out;
}

}  // namespace

std::string clean_prompt(const std::string& text) {
  const auto unescaped = html_unescape(html_unescape(text));
  std::string out;
  bool pending_space = false;
  for (unsigned char c : unescaped) {
    if (is_space(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += static_cast<char>(c);
  }
  return out;
}

io::TokenizedBatch tokenize_prompts(const io::Tokenizer& tokenizer,
                                    const std::vector<std::string>& prompts,
                                    std::int64_t max_length) {
  std::vector<std::string> cleaned;
  for (const auto& p : prompts) cleaned.push_back(clean_prompt(p));
  return tokenizer.tokenize(cleaned, max_length);
}

}  // namespace omni::pipelines
