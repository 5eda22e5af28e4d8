#include "harness.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace chorus_test {

namespace {

void applyEnv(const std::vector<std::string>& env) {
  for (const std::string& kv : env) {
    size_t eq = kv.find('=');
    setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
}

void clearEnv(const std::vector<std::string>& env) {
  for (const std::string& kv : env) unsetenv(kv.substr(0, kv.find('=')).c_str());
}

void runRank(int rank, int nranks, const ncclUniqueId& id,
             const std::function<void(int, int, ncclComm_t&)>& body) {
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
  ASSERT_EQ(r, ncclSuccess) << "rank " << rank << ": " << ncclGetLastError(nullptr);
  body(rank, nranks, comm);
  // A body that destroyed or aborted the communicator itself leaves comm NULL.
  if (comm != nullptr) {
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess) << ncclGetLastError(nullptr);
  }
}

// Exact encoding of a representable value into a small float format.
uint32_t encodeFloat(double v, int expBits, int manBits) {
  uint32_t sign = std::signbit(v) ? 1u : 0u;
  v = std::fabs(v);
  uint32_t bits = 0;
  if (v != 0) {
    int bias = (1 << (expBits - 1)) - 1;
    int e = 0;
    double m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
    int exp = e - 1 + bias;
    if (exp <= 0) {  // subnormal
      bits = static_cast<uint32_t>(std::ldexp(v, bias - 1 + manBits));
    } else {
      uint32_t man = static_cast<uint32_t>(std::ldexp(m * 2 - 1, manBits));
      bits = (static_cast<uint32_t>(exp) << manBits) | man;
    }
  }
  return (sign << (expBits + manBits)) | bits;
}

double decodeFloat(uint32_t bits, int expBits, int manBits, bool hasInf) {
  uint32_t sign = (bits >> (expBits + manBits)) & 1;
  uint32_t exp = (bits >> manBits) & ((1u << expBits) - 1);
  uint32_t man = bits & ((1u << manBits) - 1);
  int bias = (1 << (expBits - 1)) - 1;
  double v;
  uint32_t expMax = (1u << expBits) - 1;
  if (exp == expMax && hasInf) {
    v = man ? NAN : INFINITY;
  } else if (exp == expMax && !hasInf && man == (1u << manBits) - 1) {
    v = NAN;  // e4m3: only the all-ones pattern is NaN
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(man), 1 - bias - manBits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(man), -manBits),
                   static_cast<int>(exp) - bias);
  }
  return sign ? -v : v;
}

}  // namespace

int freeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

const char* modeName(RankMode mode) {
  return mode == RankMode::kThreads ? "threads" : "processes";
}

void runRanks(int nranks, RankMode mode, const std::vector<std::string>& env,
              const std::function<void(int, int, ncclComm_t&)>& body, double timeoutSeconds) {
  if (mode == RankMode::kThreads) {
    applyEnv(env);
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess) << ncclGetLastError(nullptr);
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r) threads.emplace_back([&, r] { runRank(r, nranks, id, body); });
    for (std::thread& t : threads) t.join();
    clearEnv(env);
    return;
  }
  runRankProcesses(nranks, env, nullptr, body, timeoutSeconds);
}

void runRankProcesses(int nranks, const std::vector<std::string>& env,
                      const std::function<std::vector<std::string>(int)>& rankEnv,
                      const std::function<void(int, int, ncclComm_t&)>& body,
                      double timeoutSeconds) {
  std::string commId = "127.0.0.1:" + std::to_string(freeLoopbackPort());
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    fflush(nullptr);
    pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      applyEnv(env);
      if (rankEnv) applyEnv(rankEnv(r));
      setenv("CHORUS_COMM_ID", commId.c_str(), 1);
      ncclUniqueId id;
      if (ncclGetUniqueId(&id) != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclGetUniqueId: %s\n", r, ncclGetLastError(nullptr));
        _exit(3);
      }
      runRank(r, nranks, id, body);
      fflush(nullptr);
      _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    pids.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeoutSeconds * 1000));
  std::vector<bool> done(nranks, false);
  int remaining = nranks;
  while (remaining > 0) {
    int status = 0;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < nranks; ++r) {
        if (pids[r] != p) continue;
        done[r] = true;
        --remaining;
        if (WIFSIGNALED(status))
          ADD_FAILURE() << "rank " << r << " died from signal " << WTERMSIG(status);
        else if (WEXITSTATUS(status) != 0)
          ADD_FAILURE() << "rank " << r << " failed (exit " << WEXITSTATUS(status) << ")";
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < nranks; ++r) {
        if (done[r]) continue;
        ADD_FAILURE() << "rank " << r << " hung; killed after " << timeoutSeconds << " s";
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
      }
      return;
    }
    // Children exit on their own; a short nap between reaps keeps this loop off the cores.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

size_t typeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

const char* typeName(ncclDataType_t type) {
  static const char* names[] = {"int8", "uint8", "int32",  "uint32",   "int64",  "uint64",
                                "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  return names[static_cast<int>(type)];
}

bool isFloatType(ncclDataType_t type) {
  return type == ncclFloat16 || type == ncclFloat32 || type == ncclFloat64 ||
         type == ncclBfloat16 || type == ncclFloat8e4m3 || type == ncclFloat8e5m2;
}

double wrapToType(double value, ncclDataType_t type) {
  if (isFloatType(type)) return value;
  auto v = static_cast<int64_t>(value);
  switch (type) {
    case ncclInt8:
      return static_cast<int8_t>(v);
    case ncclUint8:
      return static_cast<uint8_t>(v);
    case ncclInt32:
      return static_cast<int32_t>(v);
    case ncclUint32:
      return static_cast<uint32_t>(v);
    case ncclInt64:
      return static_cast<double>(v);
    default:
      return static_cast<double>(static_cast<uint64_t>(v));
  }
}

void storeExact(void* buf, size_t i, ncclDataType_t type, double value) {
  auto* b = static_cast<unsigned char*>(buf);
  auto iv = static_cast<int64_t>(value);
  switch (type) {
    case ncclInt8: {
      auto x = static_cast<int8_t>(iv);
      memcpy(b + i, &x, 1);
      break;
    }
    case ncclUint8: {
      auto x = static_cast<uint8_t>(iv);
      memcpy(b + i, &x, 1);
      break;
    }
    case ncclInt32: {
      auto x = static_cast<int32_t>(iv);
      memcpy(b + 4 * i, &x, 4);
      break;
    }
    case ncclUint32: {
      auto x = static_cast<uint32_t>(iv);
      memcpy(b + 4 * i, &x, 4);
      break;
    }
    case ncclInt64: {
      memcpy(b + 8 * i, &iv, 8);
      break;
    }
    case ncclUint64: {
      auto x = static_cast<uint64_t>(iv);
      memcpy(b + 8 * i, &x, 8);
      break;
    }
    case ncclFloat32: {
      auto x = static_cast<float>(value);
      memcpy(b + 4 * i, &x, 4);
      break;
    }
    case ncclFloat64:
      memcpy(b + 8 * i, &value, 8);
      break;
    case ncclFloat16: {
      auto x = static_cast<uint16_t>(encodeFloat(value, 5, 10));
      memcpy(b + 2 * i, &x, 2);
      break;
    }
    case ncclBfloat16: {
      auto x = static_cast<uint16_t>(encodeFloat(value, 8, 7));
      memcpy(b + 2 * i, &x, 2);
      break;
    }
    case ncclFloat8e4m3:
      b[i] = static_cast<uint8_t>(encodeFloat(value, 4, 3));
      break;
    case ncclFloat8e5m2:
      b[i] = static_cast<uint8_t>(encodeFloat(value, 5, 2));
      break;
    default:
      break;
  }
}

double loadValue(const void* buf, size_t i, ncclDataType_t type) {
  const auto* b = static_cast<const unsigned char*>(buf);
  switch (type) {
    case ncclInt8: {
      int8_t x;
      memcpy(&x, b + i, 1);
      return x;
    }
    case ncclUint8:
      return b[i];
    case ncclInt32: {
      int32_t x;
      memcpy(&x, b + 4 * i, 4);
      return x;
    }
    case ncclUint32: {
      uint32_t x;
      memcpy(&x, b + 4 * i, 4);
      return x;
    }
    case ncclInt64: {
      int64_t x;
      memcpy(&x, b + 8 * i, 8);
      return static_cast<double>(x);
    }
    case ncclUint64: {
      uint64_t x;
      memcpy(&x, b + 8 * i, 8);
      return static_cast<double>(x);
    }
    case ncclFloat32: {
      float x;
      memcpy(&x, b + 4 * i, 4);
      return x;
    }
    case ncclFloat64: {
      double x;
      memcpy(&x, b + 8 * i, 8);
      return x;
    }
    case ncclFloat16: {
      uint16_t x;
      memcpy(&x, b + 2 * i, 2);
      return decodeFloat(x, 5, 10, true);
    }
    case ncclBfloat16: {
      uint16_t x;
      memcpy(&x, b + 2 * i, 2);
      return decodeFloat(x, 8, 7, true);
    }
    case ncclFloat8e4m3:
      return decodeFloat(b[i], 4, 3, false);
    case ncclFloat8e5m2:
      return decodeFloat(b[i], 5, 2, true);
    default:
      return 0;
  }
}

}  // namespace chorus_test
