// What an error ends a command with: its exit code (platform/errors.h's table) and its one line,
// as app/process.cpp's guarded() prints them, and as a data-parallel rank that cannot start
// passes them to its peers (train_command.cpp).
#pragma once

#include <exception>
#include <string>

namespace training {

struct ErrorExit {
  int code;
  std::string line;
};

// A peer's error passed on (PeerError): its code. Out of memory 3, a lost peer 4, an output that
// cannot be written 5 (a path on a full disk too), bad input 2 (a config, flag, data file or path),
// anything else an internal error, 1.
ErrorExit error_exit(const std::exception& error);

}  // namespace training
