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

// Ends the rendezvous of id if its root runs in this process and has not finished: the ranks
// that joined get why as their error, and later ones a refused connection. For a rank that
// made a communicator's id and then gave up before joining (its other ranks would wait for the
// init timeout). Does nothing for a root elsewhere or already finished.
void abandonRendezvousRoot(const UniqueIdInfo& id, const Status& why);

// Number of root threads not yet joined (tests check that roots end).
int liveRendezvousRoots();

}  // namespace chorus
