// The network interface a data-parallel rank talks to its peers through: by default the local end
// of its route to MASTER_ADDR (the host name often resolves to 127.0.0.1 in containers), else those
// GLOO_SOCKET_IFNAME (a comma-separated list, as PyTorch reads it) or distributed.interface name.
#pragma once

#include <string>
#include <vector>

namespace training {

struct NetworkInterface {
  std::string name;     // "eth0"
  std::string address;  // numeric: "10.0.0.2", "fe80::1"
};

// The interface and address this host reaches host:port from (a connected UDP socket's local end,
// nothing sent); UserError where the name does not resolve, DistributedError without a route.
NetworkInterface route_to(const std::string& host, int port);

// The interfaces `list` names ("eth0,eth1") with their addresses; InterfaceRefused (listing this
// host's) for a name empty, repeated or not an interface here with an address.
std::vector<NetworkInterface> interfaces_named(const std::string& list);

bool is_loopback_address(const std::string& address);

// The interfaces a rank's peers reach it through, and what chose them.
struct PeerNetwork {
  std::vector<NetworkInterface> interfaces;
  std::string chosen_by;  // "GLOO_SOCKET_IFNAME", the configured setting, "the route to ..."
};

// The interfaces a caller's setting names, and that setting's name for messages and for
// PeerNetwork::chosen_by (the trainer's "distributed.interface": parts/setup.h's join_group).
struct ConfiguredInterfaces {
  std::string names;    // "eth0" or "eth0,eth1"; empty: not set
  std::string setting;  // what set them
};

// The `configured` interfaces, or GLOO_SOCKET_IFNAME's (`environment`, null or empty = unset),
// else the route to the store at master_addr:master_port. A configured list this host cannot use,
// or both set and different (which one was meant cannot be guessed), throws InterfaceRefused; a
// GLOO_SOCKET_IFNAME this host cannot use, UserError led by "GLOO_SOCKET_IFNAME=...".
PeerNetwork choose_peer_network(const ConfiguredInterfaces& configured, const char* environment,
                                const std::string& master_addr, int master_port);

// A TCP port on 127.0.0.1 that nothing listens on now (for a one-host, one-rank group).
int free_loopback_port();

// "veth1 (10.231.7.2)", "eth0 (10.0.0.2), eth1 (10.1.0.2)".
std::string describe(const std::vector<NetworkInterface>& interfaces);

}  // namespace training
