// Which network interface a data-parallel rank talks to its peers through. By default the one this
// host reaches the store (MASTER_ADDR) from: the local end of its route there, so that ranks on
// several hosts advertise an address the others can reach with no variable set (what the host
// name resolves to is often 127.0.0.1 on cloud images and containers). GLOO_SOCKET_IFNAME (a
// comma-separated list, as PyTorch reads it) or distributed.interface name the interfaces instead.
#pragma once

#include <string>
#include <vector>

namespace training {

struct NetworkInterface {
  std::string name;     // "eth0"
  std::string address;  // numeric: "10.0.0.2", "fe80::1"
};

// Every interface of this host that has an IPv4 or IPv6 address, by name (first address each).
std::vector<NetworkInterface> host_interfaces();

// The interface and address this host sends from to reach host:port (a connected UDP socket's
// local end; nothing is sent). Throws UserError when the host name does not resolve, and
// DistributedError when there is no route to it.
NetworkInterface route_to(const std::string& host, int port);

// The interfaces named in `list` ("eth0" or "eth0,eth1"), each with its address. Throws UserError
// led by `origin` ("GLOO_SOCKET_IFNAME=eth9") when a name is empty, repeated, or not an interface
// of this host with an address (the message lists the ones it has); for the origin
// "distributed.interface" a KeyError, which the command says with where the key was set.
std::vector<NetworkInterface> interfaces_named(const std::string& list, const std::string& origin);

bool is_loopback_address(const std::string& address);

// The interfaces a rank's peers reach it through, and what chose them.
struct PeerNetwork {
  std::vector<NetworkInterface> interfaces;
  std::string chosen_by;  // "GLOO_SOCKET_IFNAME", "distributed.interface", "the route to ..."
};

// distributed.interface (`configured`, empty = not set) or GLOO_SOCKET_IFNAME (`environment`,
// null or empty = unset), else the route to the store at master_addr:master_port. Both set and
// different is refused (UserError): which one was meant cannot be guessed.
PeerNetwork choose_peer_network(const std::string& configured, const char* environment,
                                const std::string& master_addr, int master_port);

// A TCP port on 127.0.0.1 that nothing listens on now (for a one-host, one-rank group).
int free_loopback_port();

// "veth1 (10.231.7.2)", "eth0 (10.0.0.2), eth1 (10.1.0.2)".
std::string describe(const std::vector<NetworkInterface>& interfaces);

}  // namespace training
