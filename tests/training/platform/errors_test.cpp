#include "training/platform/errors.h"

#include <gtest/gtest.h>

namespace {

// Round 5, an eighteenth pass: C1 control characters (U+0085, U+009B: a terminal's CSI), the line
// separators and bytes that are no UTF-8 reached error lines raw, and a folder's name could hold
// them. Each is escaped in a line and counts as a control character in a name.
TEST(Errors, OneLineEscapesEveryControlCharacterAndByteThatIsNoUtf8) {
  EXPECT_EQ(training::one_line("a\nb\r\tc"), "a\\nb\\r\\tc");
  EXPECT_EQ(training::one_line("\x1b[2J\x7f"), "\\x1b[2J\\x7f");
  EXPECT_EQ(training::one_line("\u0085\u009b2J"), "\\u0085\\u009b2J");
  EXPECT_EQ(training::one_line("x\u2028y\u2029"), "x\\u2028y\\u2029");
  EXPECT_EQ(training::one_line("\x9b"
                               "2J \xa0"),
            "\\x9b2J \\xa0");  // lone bytes
  EXPECT_EQ(training::one_line("caf\u00e9 \u4e2d \U0001f600 \u00a0"),
            "caf\u00e9 \u4e2d \U0001f600 \u00a0");  // text, a no-break space too
  for (const char* control : {"a\tb", "a\u0085b", "\u2028", "\xa0", "\xc3", "\xe2\x80"})
    EXPECT_TRUE(training::has_control_character(control)) << training::one_line(control);
  for (const char* text : {"", "run", "caf\u00e9", "\u4e2d\u6587", "\U0001f600", "a b"})
    EXPECT_FALSE(training::has_control_character(text)) << text;
}

}  // namespace
