// util/net.h's one loopback rule, as a table and against the kernel: an IPv4 address the rule
// calls loopback is one the routing table sends through `lo`, and the reverse.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <trainbox/util/net.h>

using trainbox::is_loopback_host;

TEST(Net, OneLoopbackRule) {
  for (const char* yes : {"localhost", "127.0.0.1", "127.0.1.1", "127.255.255.254", "::1", "0:0:0:0:0:0:0:1",
                          "::ffff:127.0.0.1", "::ffff:127.3.4.5"})
    EXPECT_TRUE(is_loopback_host(yes)) << yes;
  for (const char* no : {"", "0.0.0.0", "10.0.0.1", "128.0.0.1", "126.255.255.255", "::", "::2", "::ffff:10.0.0.1",
                         "127.example.com", "127.0.0.1.nip.io", "[::1]", "localhost:80"})
    EXPECT_FALSE(is_loopback_host(no)) << no;
}

TEST(Net, TheLoopbackRuleAgreesWithTheRoutingTable) {
  int compared = 0;
  for (const char* a : {"127.0.0.1", "127.0.1.1", "127.9.8.7", "10.255.255.1", "192.0.2.1", "198.18.0.1"}) {
    const auto r = trainbox::route_to(a);
    if (!r || r->interface.empty()) continue;  // no route there from this machine (a bare network namespace)
    ++compared;
    EXPECT_EQ(is_loopback_host(a), r->interface == "lo") << a << " routes via " << r->interface;
  }
  EXPECT_GE(compared, 3) << "127.0.0.0/8 always routes via lo";
}
