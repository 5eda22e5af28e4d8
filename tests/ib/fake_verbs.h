// What the stand-in verbs library (libfake-ibverbs.so, fake_verbs.cc) reports to the tests that
// load it, and how they make it fail. Plain C: tests find these with dlsym in the library the
// IB network loaded.
#ifndef CHORUS_FAKE_VERBS_H_
#define CHORUS_FAKE_VERBS_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  uint64_t writes;        /* RDMA writes delivered */
  uint64_t immWrites;     /* of which with immediate */
  uint64_t bytes;         /* payload bytes delivered */
  uint64_t mrsLive;       /* memory regions registered now */
  uint64_t mrsRegistered; /* ever */
  uint64_t qpsLive;
  uint64_t cqOverruns;     /* completions pushed into a full CQ */
  uint64_t badTransitions; /* ibv_modify_qp calls refused */
  uint64_t roceConnects;   /* queue pairs moved to RTR with a GRH (RoCE) */
  int lastSgidIndex;       /* the source GID index of the last RoCE RTR */
  uint64_t dmabufMrs;      /* dma-buf registrations whose fd held the bytes at their iova */
  uint64_t reads;          /* RDMA reads done */
  uint64_t readableMrs;    /* ibv_reg_mr calls that allow remote reads (not dma-bufs) */
} FakeVerbsStats;

typedef void (*FakeVerbsStatsFn)(FakeVerbsStats* out);
/* The next n RDMA writes fail with a remote access error. */
typedef void (*FakeVerbsFailWritesFn)(int n);

#ifdef __cplusplus
}
#endif

#endif
