// Communicators made from others: ncclCommSplit's and ncclCommShrink's exchanges over the
// parent, which end in the new communicator's rank, size and unique id. The first rank of each
// new communicator makes the id (a rendezvous of its own); one that could not hands out an
// empty id, so that the others fail too rather than wait.
#include <algorithm>
#include <cstring>
#include <memory>

#include "bootstrap/root.h"
#include "core/comm.h"

namespace chorus {

namespace {

// ncclCommShrink: the new communicator's id, from the first rank left to the others (the tags
// of comm.cc's link set-up are 1000-1399).
constexpr int kTagShrink = 1400;

bool isEmpty(const UniqueIdInfo& id) {
  return id.magic == 0 && id.secret == 0;
}

// While it lives, the bootstrap waits on a flag of its own instead of the communicator's, which
// may be raised (a peer died, the communicator was revoked): the exchange of a split or shrink
// is then bounded by the bootstrap's timeout alone.
class OwnAbortFlag {
 public:
  OwnAbortFlag(Bootstrap* bootstrap, const AbortFlag* usual)
      : bootstrap_(bootstrap), usual_(usual) {
    bootstrap_->setAbort(&own_);
  }
  ~OwnAbortFlag() { bootstrap_->setAbort(usual_); }
  OwnAbortFlag(const OwnAbortFlag&) = delete;
  OwnAbortFlag& operator=(const OwnAbortFlag&) = delete;

 private:
  Bootstrap* bootstrap_;
  const AbortFlag* usual_;
  AbortFlag own_;
};

}  // namespace

Result<Communicator::SplitPlan> Communicator::planSplit(int color, int key) {
  // A revoked communicator may still be split (that is what revoking it is for).
  std::unique_ptr<OwnAbortFlag> own;
  if (revoked())
    own.reset(new OwnAbortFlag(bootstrap_.get(), &abort_));
  else
    CHORUS_TRY(checkUsable());
  struct Entry {
    int32_t color;
    int32_t key;
  };
  std::vector<Entry> entries(static_cast<size_t>(nranks_));
  entries[static_cast<size_t>(rank_)] = Entry{color < 0 ? -1 : color, key};
  CHORUS_TRY(bootstrap_->allGather(entries.data(), sizeof(Entry)).withContext("ncclCommSplit"));
  SplitPlan plan;
  std::vector<int> members;  // ranks here of this rank's color, in their new order
  if (color >= 0) {
    for (int r = 0; r < nranks_; ++r)
      if (entries[static_cast<size_t>(r)].color == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return entries[static_cast<size_t>(a)].key < entries[static_cast<size_t>(b)].key;
    });
    plan.newSize = static_cast<int>(members.size());
    plan.newRank =
        static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  }
  // The first rank of each new communicator makes its id; one more exchange hands it out.
  std::vector<UniqueIdInfo> ids(static_cast<size_t>(nranks_));
  std::memset(ids.data(), 0, ids.size() * sizeof(UniqueIdInfo));
  Status made = Status::ok();
  if (plan.newRank == 0) {
    Result<UniqueIdInfo> id = createFreshUniqueId();
    if (id.isOk())
      ids[static_cast<size_t>(rank_)] = id.value();
    else
      made = id.status();  // the others learn of it from an empty id
  }
  Status shared = bootstrap_->allGather(ids.data(), sizeof(UniqueIdInfo));
  if (!shared.isOk()) {
    // Nobody will come to the root this rank made (its thread would wait an hour).
    if (plan.newRank == 0 && made.isOk())
      abandonRendezvousRoot(ids[static_cast<size_t>(rank_)], shared);
    return shared.withContext("ncclCommSplit");
  }
  CHORUS_TRY(made.withContext("ncclCommSplit: making the new communicator's unique id"));
  if (plan.newRank < 0) return plan;
  plan.id = ids[static_cast<size_t>(members.front())];
  plan.idRank = members.front();
  if (isEmpty(plan.id))
    return remoteError(
        "ncclCommSplit: rank %d, first of color %d, could not make the new "
        "communicator's unique id (see its log)",
        members.front(), color);
  return plan;
}

Result<Communicator::SplitPlan> Communicator::planShrink(const std::vector<int>& excluded,
                                                         bool abortFirst) {
  if (finalized_.load(std::memory_order_acquire))
    return invalidUsage("ncclCommShrink: the communicator was finalized");
  if (abortFirst) abort();
  std::vector<int> survivors;
  for (int r = 0; r < nranks_; ++r)
    if (!std::binary_search(excluded.begin(), excluded.end(), r)) survivors.push_back(r);
  SplitPlan plan;
  plan.newSize = static_cast<int>(survivors.size());
  plan.newRank =
      static_cast<int>(std::find(survivors.begin(), survivors.end(), rank_) - survivors.begin());
  // The communicator's own flag may be raised (a peer died, or revoked).
  OwnAbortFlag own(bootstrap_.get(), &abort_);
  const int leader = survivors.front();
  if (rank_ == leader) {
    Result<UniqueIdInfo> id = createFreshUniqueId();
    UniqueIdInfo sent{};
    if (id.isOk()) sent = id.value();  // an empty id tells the others it failed
    for (size_t i = 1; i < survivors.size(); ++i) {
      Status s = bootstrap_->send(survivors[i], kTagShrink, &sent, sizeof sent);
      if (!s.isOk()) {
        if (id.isOk()) abandonRendezvousRoot(id.value(), s);  // nobody may come to it
        return s.withContext("ncclCommShrink");
      }
    }
    CHORUS_TRY(id.status().withContext("ncclCommShrink: making the new communicator's id"));
    plan.id = id.value();
    plan.idRank = leader;
    return plan;
  }
  plan.idRank = leader;
  CHORUS_TRY(
      bootstrap_->recv(leader, kTagShrink, &plan.id, sizeof plan.id).withContext("ncclCommShrink"));
  if (isEmpty(plan.id))
    return remoteError(
        "ncclCommShrink: rank %d, the first one left, could not make the new "
        "communicator's unique id (see its log)",
        leader);
  return plan;
}

}  // namespace chorus
