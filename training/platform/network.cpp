#include "training/platform/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "training/platform/errors.h"

namespace training {

namespace {

// The numeric form of an IPv4 or IPv6 socket address, without an IPv6 scope ("%eth0").
std::string numeric_host(const sockaddr* address) {
  const socklen_t size =
      address->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  char text[NI_MAXHOST] = {};
  if (::getnameinfo(address, size, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) return "";
  std::string host(text);
  return host.substr(0, host.find('%'));
}

// Every (interface, address) pair of this host, IPv4 and IPv6, in the system's order.
std::vector<NetworkInterface> all_addresses() {
  ifaddrs* raw = nullptr;
  if (::getifaddrs(&raw) != 0) {
    throw UserError(std::string("cannot list this host's network interfaces: ") +
                    std::strerror(errno));
  }
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> list(raw, &::freeifaddrs);
  std::vector<NetworkInterface> found;
  for (const ifaddrs* entry = raw; entry; entry = entry->ifa_next) {
    if (!entry->ifa_addr || !(entry->ifa_flags & IFF_UP)) continue;
    const int family = entry->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const std::string host = numeric_host(entry->ifa_addr);
    if (!host.empty()) found.push_back({entry->ifa_name, host});
  }
  return found;
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    items.push_back(
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

std::string names_of(const std::vector<NetworkInterface>& interfaces) {
  std::string names;
  for (const auto& interface : interfaces) names += (names.empty() ? "" : ", ") + interface.name;
  return names.empty() ? "none" : names;
}

// Every interface of this host that has an IPv4 or IPv6 address, by name (first address each).
std::vector<NetworkInterface> host_interfaces() {
  std::vector<NetworkInterface> first;
  for (const auto& entry : all_addresses()) {
    const bool seen = std::any_of(first.begin(), first.end(),
                                  [&](const NetworkInterface& i) { return i.name == entry.name; });
    // An interface's IPv4 address before its IPv6 one, as Gloo picks it.
    if (!seen) {
      first.push_back(entry);
    } else if (entry.address.find(':') == std::string::npos) {
      for (auto& i : first) {
        if (i.name == entry.name && i.address.find(':') != std::string::npos)
          i.address = entry.address;
      }
    }
  }
  return first;
}

}  // namespace

NetworkInterface route_to(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* raw = nullptr;
  const int resolved = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &raw);
  if (resolved != 0) {
    throw UserError("MASTER_ADDR=" + host + ": cannot be resolved on this host (" +
                    ::gai_strerror(resolved) + ")");
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(raw, &::freeaddrinfo);
  std::string reason = "no address";
  for (const addrinfo* candidate = raw; candidate; candidate = candidate->ai_next) {
    const int fd = ::socket(candidate->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t size = sizeof local;
    // Connecting a UDP socket only asks the kernel for the route: nothing goes on the wire.
    const bool routed = ::connect(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 &&
                        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) == 0;
    if (!routed) reason = std::strerror(errno);
    ::close(fd);
    if (!routed) continue;
    const std::string address = numeric_host(reinterpret_cast<const sockaddr*>(&local));
    for (const auto& entry : all_addresses()) {
      if (entry.address == address) return entry;
    }
    reason = "the local address " + address + " belongs to no interface";
  }
  throw DistributedError("no route from this host to the store at " + host + ":" +
                         std::to_string(port) + " (MASTER_ADDR, MASTER_PORT): " + reason);
}

std::vector<NetworkInterface> interfaces_named(const std::string& list) {
  const auto available = host_interfaces();
  std::vector<NetworkInterface> chosen;
  for (const auto& name : split_list(list)) {
    if (name.empty()) {
      throw InterfaceRefused("expected interface names separated by commas, got an empty name");
    }
    if (std::any_of(chosen.begin(), chosen.end(),
                    [&](const NetworkInterface& i) { return i.name == name; })) {
      throw InterfaceRefused("names the interface " + name + " twice");
    }
    const auto match = std::find_if(available.begin(), available.end(),
                                    [&](const NetworkInterface& i) { return i.name == name; });
    if (match == available.end()) {
      throw InterfaceRefused("this host has no network interface '" + name +
                             "' that is up with an address (it has: " + names_of(available) + ")");
    }
    chosen.push_back(*match);
  }
  return chosen;
}

bool is_loopback_address(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1";
}

PeerNetwork choose_peer_network(const ConfiguredInterfaces& configured, const char* environment,
                                const std::string& master_addr, int master_port) {
  const std::string from_environment = environment ? environment : "";
  if (!configured.names.empty() && !from_environment.empty() &&
      configured.names != from_environment) {
    throw InterfaceRefused("'" + configured.names + "' and GLOO_SOCKET_IFNAME=" + from_environment +
                           " disagree; set one of them");
  }
  if (!configured.names.empty()) return {interfaces_named(configured.names), configured.setting};
  if (!from_environment.empty()) {
    try {
      return {interfaces_named(from_environment), "GLOO_SOCKET_IFNAME"};
    } catch (const InterfaceRefused& e) {
      throw UserError("GLOO_SOCKET_IFNAME=" + from_environment + ": " + e.what());
    }
  }
  return {{route_to(master_addr, master_port)},
          "the route to the store at " + master_addr + ":" + std::to_string(master_port)};
}

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  const bool bound = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), size) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0;
  const std::string reason = std::strerror(errno);
  if (fd >= 0) ::close(fd);
  if (!bound) throw DistributedError("no free TCP port on 127.0.0.1: " + reason);
  return ntohs(address.sin_port);
}

std::string describe(const std::vector<NetworkInterface>& interfaces) {
  std::string text;
  for (const auto& i : interfaces) {
    text += (text.empty() ? "" : ", ") + i.name + " (" + i.address + ")";
  }
  return text;
}

}  // namespace training
