// Multi-rank test harness: runs one function per rank either as threads of this process or as
// forked processes (real shared memory between address spaces, process isolation), plus exact
// encoders for the element types so tests build inputs and references independently of the
// library's own conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nccl.h"

namespace chorus_test {

enum class RankMode { kThreads, kProcesses };
const char* modeName(RankMode mode);

// Runs body(rank, nranks, comm) on every rank of a fresh communicator and destroys it after
// (unless body set comm to NULL because it destroyed or aborted it).
// Threads: the id comes from ncclGetUniqueId in this process. Processes: each child derives it
// from CHORUS_COMM_ID (a free loopback port), so rank 0 hosts the rendezvous. env entries are
// set (name=value) before the communicators are created. Failures of any rank, a crash or a
// hang (timeoutSeconds) fail the calling test.
void runRanks(int nranks, RankMode mode, const std::vector<std::string>& env,
              const std::function<void(int rank, int nranks, ncclComm_t& comm)>& body,
              double timeoutSeconds = 240);

// Processes only, like runRanks: rankEnv(rank) gives entries set in that rank's process after
// env (for example CHORUS_HOSTID, to place ranks on simulated hosts).
void runRankProcesses(int nranks, const std::vector<std::string>& env,
                      const std::function<std::vector<std::string>(int rank)>& rankEnv,
                      const std::function<void(int rank, int nranks, ncclComm_t& comm)>& body,
                      double timeoutSeconds = 240);

// A loopback port that was free a moment ago (for CHORUS_COMM_ID rendezvous in tests).
int freeLoopbackPort();

size_t typeSize(ncclDataType_t type);
const char* typeName(ncclDataType_t type);
bool isFloatType(ncclDataType_t type);
// Writes value (which must be exactly representable, or wrap for integers) as element i.
void storeExact(void* buf, size_t i, ncclDataType_t type, double value);
// Reads element i as a double (integers exactly, floats decoded from their bits).
double loadValue(const void* buf, size_t i, ncclDataType_t type);
// Integer types wrap: reduces an exact integer result to what the type holds.
double wrapToType(double value, ncclDataType_t type);

}  // namespace chorus_test
