// Which interface a data-parallel rank's peers reach it through: the route to the store, or the
// interfaces GLOO_SOCKET_IFNAME / distributed.interface name (refused when this host lacks one).
#include "training/platform/network.h"

#include <gtest/gtest.h>

#include "training/platform/errors.h"

namespace {

std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const training::UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

TEST(Network, TheRouteToALoopbackStoreIsTheLoopbackInterface) {
  const auto route = training::route_to("127.0.0.1", 29500);
  EXPECT_EQ(route.address, "127.0.0.1");
  EXPECT_EQ(route.name, "lo");
  EXPECT_TRUE(training::is_loopback_address(route.address));
  EXPECT_FALSE(training::is_loopback_address("10.231.7.1"));
}

// The platform says facts: what is wrong with a list, not which setting held it (the set-up puts
// the key in front: tests/training/parts/setup_test.cpp); GLOO_SOCKET_IFNAME, which it reads
// itself, it names.
TEST(Network, NamedInterfacesAreThisHostsOrRefusedInOneLine) {
  const auto lo = training::interfaces_named("lo");
  ASSERT_EQ(lo.size(), 1u);
  EXPECT_EQ(lo[0].address, "127.0.0.1");
  EXPECT_EQ(training::describe(lo), "lo (127.0.0.1)");
  const std::string missing =
      message_of([] { training::choose_peer_network({}, "lo,nope0", "127.0.0.1", 1); });
  EXPECT_EQ(missing.rfind("GLOO_SOCKET_IFNAME=lo,nope0: this host has no network interface "
                          "'nope0' that is up with an address (it has: lo",
                          0),
            0u)
      << missing;
  EXPECT_EQ(missing.find('\n'), std::string::npos);
  EXPECT_THROW(training::interfaces_named("nope0"), training::InterfaceRefused);
  EXPECT_EQ(message_of([] { training::interfaces_named("lo,lo"); }),
            "names the interface lo twice");
  EXPECT_EQ(message_of([] { training::interfaces_named("lo,"); }),
            "expected interface names separated by commas, got an empty name");
}

TEST(Network, TheSettingOrTheVariableOverrideTheRouteAndMustAgree) {
  const auto route = training::choose_peer_network({}, nullptr, "127.0.0.1", 29500);
  EXPECT_EQ(route.chosen_by, "the route to the store at 127.0.0.1:29500");
  ASSERT_EQ(route.interfaces.size(), 1u);
  EXPECT_EQ(route.interfaces[0].name, "lo");
  EXPECT_EQ(training::choose_peer_network({}, "lo", "127.0.0.1", 1).chosen_by,
            "GLOO_SOCKET_IFNAME");
  const training::ConfiguredInterfaces lo{"lo", "the setting"};
  EXPECT_EQ(training::choose_peer_network(lo, "", "127.0.0.1", 1).chosen_by, "the setting");
  EXPECT_EQ(training::choose_peer_network(lo, "lo", "127.0.0.1", 1).chosen_by, "the setting");
  EXPECT_THROW(training::choose_peer_network(lo, "eth9", "127.0.0.1", 1),
               training::InterfaceRefused);
  EXPECT_EQ(message_of([&] { training::choose_peer_network(lo, "eth9", "127.0.0.1", 1); }),
            "'lo' and GLOO_SOCKET_IFNAME=eth9 disagree; set one of them");
}

}  // namespace
