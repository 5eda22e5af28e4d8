// Chorus's TCP sockets as a network behind the net plugin interface (NetPlugin), named
// "Socket": the net transport drives it between hosts as it drives a plugin or the IB network
// (CHORUS_SOCKET_NET=1; by default the socket transport drives TCP itself). One device per
// interface findInterfaces() selects (SOCKET_IFNAME, SOCKET_FAMILY). A connection is
// SOCKET_NSTREAMS TCP streams, the listener's value (its handle says it); a message of 64 KiB
// or more is cut into one stripe per stream, as the socket transport cuts a slot.
#pragma once

#include <memory>

#include "common/status.h"

namespace chorus {

class NetPlugin;

// An error when no interface can be used.
Result<std::unique_ptr<NetPlugin>> makeSocketNet();

// The table name the socket network reports ("Socket").
extern const char kSocketNetName[];

}  // namespace chorus
