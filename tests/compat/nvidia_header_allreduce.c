/* A program written against NVIDIA's nccl.h, as an application would be, linked against Chorus's
 * libnccl.so.2 without the CUDA runtime. It all-reduces host buffers, which Chorus runs on a
 * host communicator when no GPU is usable.
 *
 * Rank and size come from CHORUS_RANK and CHORUS_NRANKS (default: rank 0 of 1). With more than
 * one rank the launcher sets NCCL_COMM_ID, so every rank derives the same unique id itself. */
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int envInt(const char* name, int fallback) {
  const char* text = getenv(name);
  if (text == NULL || *text == '\0') return fallback;
  return atoi(text);
}

/* Prints the failure of call and returns 1, or returns 0 on success. */
static int failed(ncclResult_t result, const char* call, ncclComm_t comm, int rank) {
  if (result == ncclSuccess) return 0;
  const char* detail = ncclGetLastError(comm);
  fprintf(stderr, "rank %d: %s failed: %s (%d): %s\n", rank, call, ncclGetErrorString(result),
          (int)result, detail != NULL ? detail : "");
  return 1;
}

/* Each element of the result, computed without the library: every rank contributed
 * r + 1 + i % 7. */
static float expectedSum(int nranks, size_t i) {
  float sum = 0.0f;
  for (int r = 0; r < nranks; ++r) sum += (float)(r + 1 + (int)(i % 7));
  return sum;
}

/* Returns the index of the first wrong element, or count when all are right. */
static size_t firstMismatch(const float* data, size_t count, int nranks) {
  for (size_t i = 0; i < count; ++i) {
    if (data[i] != expectedSum(nranks, i)) return i;
  }
  return count;
}

static int checkResult(const char* what, const float* data, size_t count, int rank, int nranks) {
  size_t bad = firstMismatch(data, count, nranks);
  if (bad == count) return 0;
  fprintf(stderr, "rank %d: %s: element %zu is %g, expected %g\n", rank, what, bad,
          (double)data[bad], (double)expectedSum(nranks, bad));
  return 1;
}

int main(void) {
  const int rank = envInt("CHORUS_RANK", 0);
  const int nranks = envInt("CHORUS_NRANKS", 1);
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    fprintf(stderr, "CHORUS_RANK=%d CHORUS_NRANKS=%d: need 0 <= rank < nranks\n", rank, nranks);
    return 1;
  }
  if (nranks > 1 && getenv("NCCL_COMM_ID") == NULL && getenv("CHORUS_COMM_ID") == NULL) {
    fprintf(stderr, "rank %d: with %d ranks NCCL_COMM_ID must name the rendezvous host:port\n",
            rank, nranks);
    return 1;
  }

  int version = 0;
  if (failed(ncclGetVersion(&version), "ncclGetVersion", NULL, rank)) return 1;
  printf("rank %d: NCCL version %d (header %d)\n", rank, version, NCCL_VERSION_CODE);

  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (failed(ncclGetUniqueId(&id), "ncclGetUniqueId", NULL, rank)) return 1;

  ncclComm_t comm = NULL;
  if (failed(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank", NULL, rank)) return 1;

  int commSize = 0;
  int commRank = -1;
  if (failed(ncclCommCount(comm, &commSize), "ncclCommCount", comm, rank)) return 1;
  if (failed(ncclCommUserRank(comm, &commRank), "ncclCommUserRank", comm, rank)) return 1;
  if (commSize != nranks || commRank != rank) {
    fprintf(stderr, "rank %d: communicator reports rank %d of %d, expected %d of %d\n", rank,
            commRank, commSize, rank, nranks);
    return 1;
  }

  /* Odd, so that no algorithm divides it evenly. */
  const size_t count = 100003;
  float* send = (float*)malloc(count * sizeof(float));
  float* recv = (float*)malloc(count * sizeof(float));
  if (send == NULL || recv == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    return 1;
  }
  for (size_t i = 0; i < count; ++i) {
    send[i] = (float)(rank + 1 + (int)(i % 7));
    recv[i] = -1.0f;
  }

  /* Host pointers and no stream: the call completes before it returns. */
  if (failed(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL), "ncclAllReduce",
             comm, rank)) {
    return 1;
  }
  if (checkResult("out-of-place all-reduce", recv, count, rank, nranks)) return 1;

  if (failed(ncclAllReduce(send, send, count, ncclFloat, ncclSum, comm, NULL),
             "ncclAllReduce (in place)", comm, rank)) {
    return 1;
  }
  if (checkResult("in-place all-reduce", send, count, rank, nranks)) return 1;

  if (failed(ncclCommDestroy(comm), "ncclCommDestroy", NULL, rank)) return 1;
  free(send);
  free(recv);
  printf("OK\n");
  return 0;
}
