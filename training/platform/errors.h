// Errors the app maps to exit codes after printing their one-line message. Data file problems
// use data::DataError, mapped like UserError.
#pragma once

#include <c10/util/Exception.h>

#include <cctype>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "training/platform/text.h"

namespace training {

// The process's exit codes, one table for `train` and its sweep trials.
inline constexpr int kExitOk = 0;
inline constexpr int kExitInternalError = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitOutOfMemory = 3;
inline constexpr int kExitDistributed = 4;
inline constexpr int kExitCannotWrite = 5;  // an output could not be written (disk full, quota...)
inline constexpr int kExitDiverged = 6;     // the loss stopped being a number; results written
// train sweep, launcher slurm: trials whose task ended without a result (failed, timed out, lost
// its node); the tables hold the rest, and the same sweep run again submits only those.
inline constexpr int kExitTrialsFailed = 7;
inline constexpr int kExitStopped = 130;  // stopped by SIGINT/SIGTERM, checkpoint written

// The first line of a message: LibTorch's and Gloo's errors append backtraces and context lines.
inline std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

// The first line of an error's message, without LibTorch's backtrace.
inline std::string error_line(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  return first_line(c10_error ? c10_error->what_without_backtrace() : error.what());
}

// How many of the `length` bytes of `text` fit in `most` without cutting a UTF-8 character: all
// of them, or the bytes before the character that would not fit whole. Allocates nothing (the
// pre-init check of app/process.cpp uses it).
inline size_t utf8_prefix(const char* text, size_t length, size_t most) {
  if (length <= most) return length;
  size_t end = most;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return end;
}

// `text` as one word of a shell command in advice ("train --resume 'my run'"): as it is when it
// holds only characters no shell reads specially, else in single quotes.
inline std::string shell_word(const std::string& text) {
  const bool plain =
      !text.empty() && text.find_first_not_of(
                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
                           "KLMNOPQRSTUVWXYZ0123456789_./:=@%+,-") == std::string::npos;
  if (plain) return text;
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// `text` (a folder's name, a path, an error) as plain text in a markdown table's cell or a
// heading: what markdown would read as markup escaped with a backslash, as CommonMark escapes ASCII
// punctuation: a backslash, code spans, emphasis (`*`, and `_` except inside a word, where it
// is none: snake_case stays readable), a link's `](`, HTML and autolinks (`<`), strikethrough,
// entities, a heading's closing '#', and '|', which ends a cell; a line break as a space.
inline std::string markdown_text(const std::string& text) {
  const auto in_word = [&text](size_t i) {
    return i > 0 && i + 1 < text.size() && std::isalnum(static_cast<unsigned char>(text[i - 1])) &&
           std::isalnum(static_cast<unsigned char>(text[i + 1]));
  };
  std::string plain;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (std::string_view("\\`*<|~&#").find(c) != std::string_view::npos ||
        (c == '_' && !in_word(i)) || (c == ']' && i + 1 < text.size() && text[i + 1] == '('))
      plain += '\\';
    plain += c == '\n' || c == '\r' ? ' ' : c;
  }
  return plain;
}

// Something the user can fix (bad arguments, config, environment): exit code 2.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A valid config value this machine or data cannot use (a device it lacks, a batch larger than the
// data): "training.device: ...", led by where the key was set (config.h, with_key_origins). `with`
// names the keys that make the refusal with `key`: where one of them, not `key`, was set by a
// flag, that flag is named (a resume's `--set memory.limit=none`, not the stored config).
class KeyError : public UserError {
 public:
  KeyError(std::string key, const std::string& what, std::vector<std::string> with = {})
      : UserError(key + ": " + what), key_(std::move(key)), with_(std::move(with)) {}
  const std::string& key() const { return key_; }
  // `key`, then `with`.
  std::vector<std::string> keys() const {
    std::vector<std::string> all{key_};
    all.insert(all.end(), with_.begin(), with_.end());
    return all;
  }

 private:
  std::string key_;
  std::vector<std::string> with_;
};

// What a process group refuses before waiting for anyone (a backend it cannot use, an interface
// this host lacks or two that disagree), as facts the set-up words with their keys (join_group).
class BackendRefused : public UserError {
 public:
  using UserError::UserError;
};
class InterfaceRefused : public UserError {
 public:
  using UserError::UserError;
};

// An output file could not be written: the disk is full, a quota or file-size limit was hit, or
// the device failed (exit code 5). The message names the file; what was written before is intact.
class CannotWrite : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A data-parallel rank lost contact with the others, or never reached them: exit code 4.
class DistributedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Training ran out of device memory (or of the emulated memory.limit): exit code 3. The message
// gives the peak reached, the limit and the remedies.
class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Another data-parallel rank's error, passed on where it could not start: this rank ends with
// that rank's exit code and line.
class PeerError : public std::runtime_error {
 public:
  PeerError(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

}  // namespace training
