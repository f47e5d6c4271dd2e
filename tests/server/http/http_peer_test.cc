// http_peer.h and HttpStreamSink's socket watch on real loopback TCP connections: the accepted
// socket is found from its addresses, a peer that closes is seen at the next check (what the
// engine loop asks before every step), and open or pipelined connections are not.
#include "server/http/http_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "server/http/http_stream_sink.h"

namespace flatstate::server {
namespace {

int Port(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t n = sizeof(a);
  if (peer) {
    getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n);
  } else {
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  }
  return ntohs(a.sin_port);
}

// A listening socket on 127.0.0.1, a client connected to it, and the accepted server side.
struct Connection {
  int listener = -1, client = -1, server = -1;
  Connection() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listener, 4), 0);
    a.sin_port = htons(static_cast<uint16_t>(Port(listener, false)));
    client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    server = accept(listener, nullptr, nullptr);
    EXPECT_GE(server, 0);
  }
  ~Connection() {
    for (int fd : {listener, client, server}) {
      if (fd >= 0) close(fd);
    }
  }
  void CloseClient() {
    close(client);
    client = -1;
  }
};

TEST(HttpPeer, FindsTheAcceptedSocketFromTheRequestsAddresses) {
  Connection c;
  const int server_port = Port(c.listener, false), client_port = Port(c.client, false);
  EXPECT_EQ(FindPeerSocket("127.0.0.1", client_port, server_port), c.server);
  // The client's own socket has the ports the other way round: not it.
  EXPECT_EQ(FindPeerSocket("127.0.0.1", server_port, client_port), c.client);
  EXPECT_EQ(FindPeerSocket("127.0.0.2", client_port, server_port), -1);
  EXPECT_EQ(FindPeerSocket("127.0.0.1", client_port, server_port + 1), -1);
  EXPECT_EQ(FindPeerSocket("127.0.0.1", -1, server_port), -1);
}

TEST(HttpPeer, ClosedPeerIsSeenAtOnceAndUnreadBytesAreLeft) {
  Connection c;
  EXPECT_FALSE(PeerClosed(c.server));
  ASSERT_EQ(write(c.client, "GET", 3), 3);  // a pipelined request: open, and not consumed
  EXPECT_FALSE(PeerClosed(c.server));
  char buf[3];
  ASSERT_EQ(read(c.server, buf, 3), 3);
  c.CloseClient();
  EXPECT_TRUE(PeerClosed(c.server));
  EXPECT_FALSE(PeerClosed(-1));
}

TEST(HttpPeer, SinkWatchingASocketIsCancelledWhenThePeerCloses) {
  Connection c;
  HttpStreamSink sink({});
  sink.WatchSocket(c.server);
  EXPECT_FALSE(sink.Cancelled());
  c.CloseClient();
  EXPECT_TRUE(sink.Cancelled());  // the next check, i.e. before the loop's next step
  EXPECT_TRUE(sink.Cancelled());  // and it stays so
  HttpStreamSink unwatched({});
  unwatched.WatchSocket(c.server);
  unwatched.StopWatchingSocket();
  EXPECT_FALSE(unwatched.Cancelled());
}

}  // namespace
}  // namespace flatstate::server
