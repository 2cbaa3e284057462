// Text as the program shows and judges it: UTF-8 read one code point at a time, a value quoted on
// one line (its control characters escaped), and whether a name holds a control character or
// shows as nothing.
#pragma once

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

namespace training {

// The code point at `at` in `text` and its length in bytes (1 to 4); length 0 where the bytes
// there are no UTF-8 (a lone or cut continuation, an overlong form, a surrogate, above U+10FFFF).
struct CodePoint {
  char32_t code = 0;
  size_t length = 0;
};
inline CodePoint code_point_at(const std::string& text, size_t at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  const size_t n = lead < 0x80   ? 1
                   : lead < 0xC2 ? 0
                   : lead < 0xE0 ? 2
                   : lead < 0xF0 ? 3
                   : lead < 0xF5 ? 4
                                 : 0;
  if (n == 0 || at + n > text.size()) return {};
  char32_t code = n == 1 ? lead : lead & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) {
    const auto next = static_cast<unsigned char>(text[at + i]);
    if ((next & 0xC0) != 0x80) return {};
    code = (code << 6) | (next & 0x3F);
  }
  static const char32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};  // by length: no overlong form
  if (code < kLeast[n] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return {};
  return {code, n};
}

// C0 and DEL, C1 (U+0080-U+009F), the line and paragraph separators U+2028 and U+2029.
inline bool is_control(char32_t code) {
  return code < 0x20 || (code >= 0x7F && code <= 0x9F) || code == 0x2028 || code == 0x2029;
}

// Whether `text` holds a control character (a path with a line break or tab breaks every line and
// command that names it).
inline bool has_control_character(const std::string& text) {
  for (size_t at = 0; at < text.size();) {
    const CodePoint c = code_point_at(text, at);
    if (c.length > 0 && is_control(c.code)) return true;
    at += std::max<size_t>(c.length, 1);
  }
  return false;
}

// Whether `text` is UTF-8 throughout.
inline bool is_utf8(const std::string& text) {
  for (size_t at = 0, length = 0; at < text.size(); at += length) {
    length = code_point_at(text, at).length;
    if (length == 0) return false;
  }
  return true;
}

// `value`'s last `digits` hexadecimal digits, lower case ("00a0").
inline std::string hex_text(char32_t value, int digits) {
  std::string out;
  for (int i = digits - 1; i >= 0; --i) out += "0123456789abcdef"[(value >> (4 * i)) & 15];
  return out;
}

// `text` on one line: a value quoted in a message, and every error line as the app prints it (a
// file name may hold anything): \n, \r, \t, other control characters \xNN or \uNNNN, and each
// byte that is no UTF-8 \xNN.
inline std::string one_line(const std::string& text) {
  std::string line;
  for (size_t at = 0; at < text.size();) {
    const CodePoint c = code_point_at(text, at);
    if (c.length == 0) {
      line += "\\x" + hex_text(static_cast<unsigned char>(text[at++]), 2);
      continue;
    }
    at += c.length;
    if (!is_control(c.code)) {
      line += text.substr(at - c.length, c.length);
    } else {
      line += c.code == '\n'   ? "\\n"
              : c.code == '\r' ? "\\r"
              : c.code == '\t' ? "\\t"
              : c.code < 0x80  ? "\\x" + hex_text(c.code, 2)
                               : "\\u" + hex_text(c.code, 4);
    }
  }
  return line;
}

// Whether `code` is white space or invisible: Unicode's White_Space and
// Default_Ignorable_Code_Point and the blank-looking U+2800.
inline bool is_blank(char32_t code) {
  static const std::pair<char32_t, char32_t> kBlanks[] = {
      {0x09, 0x0D},     {0x20, 0x20},       {0x85, 0x85},       {0xA0, 0xA0},      {0xAD, 0xAD},
      {0x34F, 0x34F},   {0x61C, 0x61C},     {0x115F, 0x1160},   {0x1680, 0x1680},  {0x17B4, 0x17B5},
      {0x180B, 0x180F}, {0x2000, 0x200F},   {0x2028, 0x202F},   {0x205F, 0x206F},  {0x2800, 0x2800},
      {0x3000, 0x3000}, {0x3164, 0x3164},   {0xFE00, 0xFE0F},   {0xFEFF, 0xFEFF},  {0xFFA0, 0xFFA0},
      {0xFFF0, 0xFFF8}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0000, 0xE0FFF}};
  return std::any_of(std::begin(kBlanks), std::end(kBlanks),
                     [&](const auto& r) { return code >= r.first && code <= r.second; });
}

// The character at `at` in `text`: its code point, its length in bytes (1 for a byte that is no
// UTF-8) and whether it is blank (is_blank; the lone bytes 0x85 and 0xA0 that yaml-cpp makes of
// YAML's "\N" and "\_" too, other bytes that are no UTF-8 not).
struct Character {
  char32_t code;
  size_t length;
  bool blank;
};
inline Character character_at(const std::string& text, size_t at) {
  const CodePoint c = code_point_at(text, at);
  const auto byte = static_cast<unsigned char>(text[at]);
  if (c.length == 0) return {byte, 1, byte == 0x85 || byte == 0xA0};
  return {c.code, c.length, is_blank(c.code)};
}

// Whether `text` is only white space or invisible characters (or empty): a name of only these
// shows as nothing.
inline bool blank(const std::string& text) {
  for (size_t at = 0; at < text.size();) {
    const Character c = character_at(text, at);
    if (!c.blank) return false;
    at += c.length;
  }
  return true;
}

// `text` with its blank characters but the ASCII space written \uNNNN (a byte that is no UTF-8
// \xNN): a name refused for an invisible character shows it.
inline std::string blanks_shown(const std::string& text) {
  std::string out;
  for (size_t at = 0; at < text.size();) {
    const Character c = character_at(text, at);
    if (c.blank && c.code > 0x7F) {
      out += c.length == 1     ? "\\x" + hex_text(c.code, 2)
             : c.code > 0xFFFF ? "\\U" + hex_text(c.code, 8)
                               : "\\u" + hex_text(c.code, 4);
    } else {
      out.append(text, at, c.length);
    }
    at += c.length;
  }
  return out;
}

// Whether a part of `path` (between '/') starts or ends with a blank character: a folder a listing
// shows as another's (" run", "run\u00a0" as "run"). A variation selector, a zero-width joiner or
// a tag character after a visible character is part of it ("run\u2764\ufe0f" ends visibly).
inline bool blank_at_an_end(const std::string& path) {
  const auto attaches = [](char32_t c) {
    return c == 0x200D || (c >= 0xFE00 && c <= 0xFE0F) || (c >= 0xE0020 && c <= 0xE007F) ||
           (c >= 0xE0100 && c <= 0xE01EF);
  };
  for (size_t begin = 0; begin <= path.size();) {
    const size_t end = std::min(path.find('/', begin), path.size());
    bool first = true, last = false;
    for (size_t at = begin; at < end;) {
      const Character c = character_at(path, at);
      if (first && c.blank) return true;
      if (first || !(attaches(c.code) && !last)) last = c.blank;
      first = false;
      at += c.length;
    }
    if (last) return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace training
