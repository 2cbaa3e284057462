// The launch environment (distributed.h's launch_env_from_environment): torchrun's variables.
#include <cstdlib>
#include <string>

#include "build_config.h"
#include "training/platform/distributed.h"
#include "training/platform/errors.h"

namespace training {

namespace {

int64_t env_integer(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* text = std::getenv(name);
  if (!text) return fallback;
  try {
    size_t used = 0;
    const int64_t value = std::stoll(text, &used);
    if (used == std::string(text).size() && value >= lo && value <= hi) return value;
  } catch (const std::exception&) {
  }
  throw UserError(std::string(name) + ": expected an integer in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "], got '" + text + "'");
}

}  // namespace

int64_t world_size_from_environment() {
  return env_integer("WORLD_SIZE", 1, 1, 1 << 16);
}

std::optional<LaunchEnv> launch_env_from_environment() {
  if (!std::getenv("WORLD_SIZE")) return std::nullopt;
  LaunchEnv env;
  env.world_size = world_size_from_environment();
  env.rank = env_integer("RANK", 0, 0, env.world_size - 1);
  env.local_rank = env_integer("LOCAL_RANK", env.rank, 0, env.world_size - 1);
  if (const char* addr = std::getenv("MASTER_ADDR")) env.master_addr = addr;
  env.master_port = env_integer("MASTER_PORT", 29500, 1, 65535);
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent && std::string(agent) == "True";
  if (const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT")) env.restart = restart;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) env.gloo_socket_ifname = ifname;
  if (env.world_size > 1 && (!std::getenv("RANK") || !std::getenv("MASTER_PORT"))) {
    throw UserError("WORLD_SIZE=" + std::to_string(env.world_size) +
                    " needs RANK and MASTER_PORT too (start the ranks with " +
                    shell_word(TRAIN_SCRIPTS_DIR "/launch.py") + ")");
  }
  return env;
}

}  // namespace training
