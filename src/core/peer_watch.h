// PeerWatch: notices when a rank on the same host goes away in the middle of a job. Over
// sockets a dead peer shows as a closed connection, but ranks that share memory only see their
// peer stop moving and would wait for the whole timeout (CHORUS_TIMEOUT). So every rank holds a
// lock that the kernel drops when its process ends: an open-file-description (OFD) lock on a
// small shared-memory file of its own, which its local peers keep open too. A thread looks at
// the peers' locks every CHORUS_PEER_WATCH_MS; once one is gone it reports an error naming the
// rank, which aborts the waits of the communicator, so the survivors' calls fail within that
// interval instead of the timeout.
//
// The lock also goes when a rank destroys its communicator; that rank first marks its file,
// and a peer whose lock went with the mark is only no longer watched (its peers may be in the
// middle of finalizing or destroying theirs).
//
// The same file is each rank's board: the tag of the collective it made last (call_tag.h) and,
// once its communicator failed, why. The watching thread also compares the peers' boards with
// its own: a peer whose call of the same number differs (ranks that disagree, possibly so much
// that they run different algorithms and never exchange data) or whose communicator failed
// fails this rank's communicator too, within the interval instead of the timeout.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "transport/connector.h"

namespace chorus {

class PeerWatch {
 public:
  struct Peer {
    int rank;
    int pid;
  };
  using Report = std::function<void(const Status&)>;

  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Creates and locks this rank's file, named from prefix and rank. Every local rank calls it,
  // then all pass a barrier, then each calls watch (which opens the peers' files), then all pass
  // a second barrier and each calls unlinkOwn.
  static Result<std::unique_ptr<PeerWatch>> create(const std::string& prefix, int rank);
  // Opens the peers' files (a peer without one, which made no lock, is not watched) and starts
  // looking every intervalMs; report is called once, from the watching thread, when a peer's
  // lock is gone.
  Status watch(const std::vector<Peer>& peers, int intervalMs, Report report);
  // Removes this rank's file name; the file lives on while anyone holds it open.
  void unlinkOwn();

  // This rank's board: the collective it makes now, which the watching thread asks
  // currentCall for and publishes at each look (checkCalls: the peers compare it with theirs),
  // and its failure (said once; the peers' communicators fail too). Both before watch.
  void setCurrentCall(std::function<CallTag()> currentCall, bool checkCalls) {
    currentCall_ = std::move(currentCall);
    checkCalls_ = checkCalls;
  }
  void publishFailure(const std::string& message);

  // Watched peer i: still holding its lock, gone after destroying its communicator, or gone
  // without.
  enum class State { kAlive, kLeft, kDied };
  State state(size_t i) const;
  // The watched peers gone without destroying their communicator (their shared-memory names
  // may be left: Communicator::removeLeftNames).
  std::vector<int> diedRanks() const;

 private:
  static constexpr char kLeft = 1;  // written into the file by a rank that destroys its comm
  struct Board;
  PeerWatch() = default;
  void run();
  void publishCall(const CallTag& tag);
  // A report about watched peer i's board (this rank makes `mine`), or ok.
  Status lookAtBoard(size_t i, const CallTag& mine);

  std::string prefix_;
  std::string ownName_;
  int ownFd_ = -1;
  int rank_ = -1;
  Board* ownBoard_ = nullptr;         // mapped from ownFd_
  std::vector<const Board*> boards_;  // by watched peer (null: not mapped)
  bool checkCalls_ = true;
  std::function<CallTag()> currentCall_;
  std::vector<Peer> peers_;
  std::vector<int> peerFds_;
  std::vector<bool> watching_;  // by peer: not yet seen gone
  int intervalMs_ = 0;
  Report report_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
};

}  // namespace chorus
