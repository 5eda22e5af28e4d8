#include "core/group.h"

#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace chorus {

namespace {

struct Queue {
  const void* key;
  std::vector<std::function<Status()>> tasks;
  std::vector<HostWork> works;
  CollRunner collRunner;
  std::vector<P2pOp> p2pOps;
  P2pRunner p2pRunner;
};

struct GroupState {
  std::vector<Queue> queues;
};

thread_local GroupState tGroup;
GroupIsAsync gIsAsync = nullptr;
GroupSubmit gSubmit = nullptr;
// Apart from the queues and of a plain type in the initial-exec model: every collective call
// looks at it, and that way the look is one load, without a call to resolve the variable or
// to construct the queues (a few bytes of the static TLS block, which libraries loaded with
// dlopen may use too).
__attribute__((tls_model("initial-exec"))) thread_local int tGroupDepth = 0;

Status runQueue(Queue& q) {
  for (auto& task : q.tasks) {
    Status s = task();
    if (!s.isOk()) return s;
  }
  if (!q.works.empty()) CHORUS_TRY(q.collRunner(q.works));
  if (!q.p2pOps.empty()) return q.p2pRunner(q.p2pOps);
  return Status::ok();
}

Status runAll(std::vector<Queue>& queues) {
  if (queues.size() == 1) return runQueue(queues[0]);
  std::vector<Status> results(queues.size());
  std::vector<std::thread> threads;
  threads.reserve(queues.size());
  for (size_t i = 0; i < queues.size(); ++i)
    threads.emplace_back([&, i] { results[i] = runQueue(queues[i]); });
  for (std::thread& t : threads) t.join();
  for (const Status& s : results)
    if (!s.isOk()) return s;
  return Status::ok();
}

Queue& queueFor(const void* key) {
  for (Queue& q : tGroup.queues)
    if (q.key == key) return q;
  tGroup.queues.push_back(Queue{key, {}, {}, {}, {}, {}});
  return tGroup.queues.back();
}

}  // namespace

bool groupActive() {
  return tGroupDepth > 0;
}

void groupStart() {
  ++tGroupDepth;
}

void groupEnqueue(const void* key, std::function<Status()> task) {
  queueFor(key).tasks.push_back(std::move(task));
}

void groupEnqueueColl(const void* key, const HostWork& work, const CollRunner& runner) {
  Queue& q = queueFor(key);
  q.works.push_back(work);
  if (!q.collRunner) q.collRunner = runner;
}

void groupEnqueueP2p(const void* key, const P2pOp& op, const P2pRunner& runner) {
  Queue& q = queueFor(key);
  q.p2pOps.push_back(op);
  if (!q.p2pRunner) q.p2pRunner = runner;
}

void setGroupAsyncHandoff(GroupIsAsync isAsync, GroupSubmit submit) {
  gIsAsync = isAsync;
  gSubmit = submit;
}

Status groupEnd() {
  if (tGroupDepth == 0)
    return invalidUsage("ncclGroupEnd called without a matching ncclGroupStart");
  if (--tGroupDepth > 0) return Status::ok();
  std::vector<Queue> all = std::move(tGroup.queues);
  tGroup.queues.clear();
  // Non-blocking communicators' shares go to their runners; the rest runs here.
  std::vector<Queue> queues;
  Status handedOff = Status::ok();
  for (Queue& q : all) {
    if (gIsAsync == nullptr || !gIsAsync(q.key)) {
      queues.push_back(std::move(q));
      continue;
    }
    auto shared = std::make_shared<Queue>(std::move(q));
    Status s = gSubmit(shared->key, [shared]() { return runQueue(*shared); });
    if (handedOff.isOk() || (handedOff.code() == Code::kInProgress && !s.isOk())) handedOff = s;
  }
  if (queues.empty()) return handedOff;
  Status here = runAll(queues);
  return here.isOk() ? handedOff : here;
}

}  // namespace chorus
