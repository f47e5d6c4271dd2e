// The socket of an HTTP request, found from its addresses, so that the engine loop can notice a
// client that went away within one engine step, without waiting for a write to fail.
// cpp-httplib 0.11 (Debian 12) does not hand its handlers the socket; FindPeerSocket looks
// through this process's open descriptors (/proc/self/fd) for the TCP socket whose local port,
// peer port and peer address are the request's: one scan per request, O(open descriptors).
// Linux only. Thread-safe (no state); never fails: -1 when nothing matches.
#ifndef FLATSTATE_SERVER_HTTP_HTTP_PEER_H_
#define FLATSTATE_SERVER_HTTP_HTTP_PEER_H_

#include <string>

namespace flatstate::server {

// The descriptor of the connected socket with these addresses (as httplib::Request reports them:
// numeric host, ports), or -1.
int FindPeerSocket(const std::string& remote_addr, int remote_port, int local_port);

// True when the peer of connected socket `fd` has closed its side (a non-blocking peek reads
// end of file) or the socket failed; false while it is open or holds unread bytes (a pipelined
// request). Does not consume anything.
bool PeerClosed(int fd);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_HTTP_PEER_H_
