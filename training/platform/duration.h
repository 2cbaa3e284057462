// Durations: measured (seconds_since), and as people read them: "1:02:03", "4:05".
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace training {

// Seconds from `start` to now, on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Seconds since the epoch, on the system clock.
inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline std::string format_duration(double seconds) {
  const auto total = static_cast<long>(seconds + 0.5);
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(text, sizeof text, "%ld:%02ld", total / 60, total % 60);
  }
  return text;
}

}  // namespace training
