// The rendezvous root: a thread that collects every rank's peer listener address and sends the
// whole table back once all ranks arrived (or tells them who is missing).
#pragma once

#include "bootstrap/bootstrap.h"
#include "common/socket.h"
#include "common/status.h"

namespace chorus {

// Starts the root of the rendezvous of id, accepting on listener. The thread ends by itself:
// after sending the table, after the init timeout (counted from the first rank's arrival, with
// the timeout that rank announced), or after one hour when no rank ever arrives. A process-wide
// registry joins finished roots and stops and joins the rest when the process exits.
Status startRendezvousRoot(Listener listener, const UniqueIdInfo& id);

// Number of root threads not yet joined (tests check that roots end).
int liveRendezvousRoots();

}  // namespace chorus
