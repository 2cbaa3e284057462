#include "training/platform/text.h"

#include <gtest/gtest.h>

namespace {

// Round 5, an eighteenth pass: C1 control characters (U+0085, U+009B: a terminal's CSI), the line
// separators and bytes that are no UTF-8 reached error lines raw, and a folder's name could hold
// them. Each is escaped in a line; a control character counts as one in a name.
TEST(Text, OneLineEscapesEveryControlCharacterAndByteThatIsNoUtf8) {
  EXPECT_EQ(training::one_line("a\nb\r\tc"), "a\\nb\\r\\tc");
  EXPECT_EQ(training::one_line("\x1b[2J\x7f"), "\\x1b[2J\\x7f");
  EXPECT_EQ(training::one_line("\u0085\u009b2J"), "\\u0085\\u009b2J");
  EXPECT_EQ(training::one_line("x\u2028y\u2029"), "x\\u2028y\\u2029");
  EXPECT_EQ(training::one_line("\x9b"
                               "2J \xa0"),
            "\\x9b2J \\xa0");  // lone bytes
  EXPECT_EQ(training::one_line("caf\u00e9 \u4e2d \U0001f600 \u00a0"),
            "caf\u00e9 \u4e2d \U0001f600 \u00a0");  // text, a no-break space too
  // An overlong line break, a surrogate, above U+10FFFF: no UTF-8, each byte escaped.
  EXPECT_EQ(training::one_line("a\xe0\x80\x8a"
                               "b"),
            "a\\xe0\\x80\\x8ab");
  EXPECT_EQ(training::one_line("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(training::one_line("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  for (const char* control : {"a\tb", "a\u0085b", "\u2028", "\x7f"})
    EXPECT_TRUE(training::has_control_character(control)) << training::one_line(control);
  for (const char* text :
       {"", "run", "caf\u00e9", "\u4e2d\u6587", "\U0001f600", "a b", "\xe9t\xe9"})
    EXPECT_FALSE(training::has_control_character(text)) << training::one_line(text);
  EXPECT_TRUE(training::is_utf8("caf\u00e9 \U0001f600"));
  for (const char* bad : {"\xe9t\xe9", "\xc3", "\xe0\x80\x8a", "\xed\xa0\x80", "\xf4\x90\x80\x80"})
    EXPECT_FALSE(training::is_utf8(bad)) << training::one_line(bad);
}

// A name of only Unicode's white space (a no-break space, U+3000) or of characters drawn as
// nothing (U+2060, U+3164, a tag) was taken: a folder that shows as nothing.
TEST(Text, BlankIsWhiteSpaceOrWhatIsDrawnAsNothing) {
  EXPECT_TRUE(training::blank(""));
  EXPECT_TRUE(training::blank("\u00a0 \u3000\ufeff\t"));
  EXPECT_TRUE(training::blank("\u2060\u200d\u3164\u00ad\U000e0020\u2800"));
  EXPECT_TRUE(training::blank("\xa0\x85"));  // yaml-cpp's reading of YAML's "\_" and "\N"
  EXPECT_FALSE(training::blank("\u00a0caf\u00e9"));
  EXPECT_FALSE(training::blank("\u00e0"));        // its lead byte is no blank's
  EXPECT_FALSE(training::blank("\xc3"));          // no UTF-8
  EXPECT_FALSE(training::blank("\xe0\x80\xa0"));  // an overlong space is none
}

// Nineteenth pass: a folder named " run" or "run\u00a0" shows as "run" in a listing.
TEST(Text, ABlankAtAnEndOfAPartOfAPathIsFound) {
  for (const std::string shown_as_another :
       {" run", "run ", "\u00a0run", "run\u3000", "\ufeffrun", "runs/ x", "runs/x\u200b/y", "\xa0"})
    EXPECT_TRUE(training::blank_at_an_end(shown_as_another)) << shown_as_another;
  // A variation selector or joiner after a visible character is part of it (an emoji's).
  EXPECT_TRUE(training::blank_at_an_end("run \ufe0f"));
  for (const std::string fine : {"", "run", "a b", "a\u00a0b", "/abs/runs/", "runs//x", "caf\u00e9",
                                 "run\u2764\ufe0f", "x\U0001f3f4\U000e0067\U000e007f"})
    EXPECT_FALSE(training::blank_at_an_end(fine)) << fine;
  // A refused name shows its invisible characters escaped; the ASCII space and the rest as typed.
  EXPECT_EQ(training::blanks_shown("\ufeffa b\u00a0\u3000c\u200b\U000e0020\xa0\u00e9"),
            "\\ufeffa b\\u00a0\\u3000c\\u200b\\U000e0020\\xa0\u00e9");
}

}  // namespace
