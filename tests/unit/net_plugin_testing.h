// Helpers of the net plugin and IB network tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "transport/net_plugin/net_abi.h"
#include "transport/net_plugin/net_plugin.h"

// Sets a variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// Host memory as a GPU exports it, a dma-buf: `pages` pages of a memfd mapped shared, byte i
// holding i % 253 (so that the bytes at two offsets differ); unmapped and closed at the end.
struct DmaBufStandIn {
  explicit DmaBufStandIn(size_t pages)
      : bytes(pages * static_cast<size_t>(sysconf(_SC_PAGESIZE))),
        fd(memfd_create("chorus-dmabuf", MFD_CLOEXEC)) {
    void* map = fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0
                    ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                    : MAP_FAILED;
    mem = map != MAP_FAILED ? static_cast<unsigned char*>(map) : nullptr;
    for (size_t i = 0; mem != nullptr && i < bytes; ++i)
      mem[i] = static_cast<unsigned char>(i % 253);
  }
  ~DmaBufStandIn() {
    if (mem != nullptr) munmap(mem, bytes);
    if (fd >= 0) close(fd);
  }
  DmaBufStandIn(const DmaBufStandIn&) = delete;
  DmaBufStandIn& operator=(const DmaBufStandIn&) = delete;
  size_t bytes;
  int fd;
  unsigned char* mem = nullptr;
};

// Device 0 of p says it registers dma-bufs as well as host memory.
inline void expectDmaBufSupport(chorus::NetPlugin& p) {
  chorus::NetPlugin::Properties props;
  ASSERT_TRUE(p.properties(0, &props).isOk());
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST | NCCL_PTR_DMABUF);
}

// Connects a sender and a receiver on device dev of p, driving connect and accept in turn from
// one thread, as a single thread must.
inline void connectPair(chorus::NetPlugin& p, int dev, void** send, void** recv) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = nullptr;
  ASSERT_TRUE(p.listen(dev, handle, &listen).isOk());
  *send = *recv = nullptr;
  for (int i = 0; i < 1000000 && (*send == nullptr || *recv == nullptr); ++i) {
    if (*send == nullptr) {
      auto s = p.connect(dev, handle, send);
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    if (*recv == nullptr) {
      auto s = p.accept(listen, recv);
      ASSERT_TRUE(s.isOk()) << s.message();
    }
  }
  ASSERT_NE(*send, nullptr);
  ASSERT_NE(*recv, nullptr);
  ASSERT_TRUE(p.closeListen(listen).isOk());
}

// One grouped receive of three buffers tagged 5, 6 and 7 on p's connection takes messages of
// bytes[0..2] sent in the order 7, 5, 6 (each send posted again until p takes it), each into the
// buffer of its tag: checks each buffer's size and contents and that nothing is past them.
inline void expectGroupedReceive(chorus::NetPlugin& p, void* send, void* recv,
                                 const size_t bytes[3]) {
  int tags[3] = {5, 6, 7};
  std::vector<unsigned char> out[3], in[3];
  void *smr[3], *rmr[3], *bufs[3];
  size_t room[3];
  for (int i = 0; i < 3; ++i) {
    out[i].assign(bytes[i] + 1, static_cast<unsigned char>(0x10 + i));
    in[i].assign(bytes[i] + 64, 0xee);
    bufs[i] = in[i].data();
    room[i] = in[i].size();
    ASSERT_TRUE(p.regMr(send, out[i].data(), out[i].size(), &smr[i]).isOk());
    ASSERT_TRUE(p.regMr(recv, in[i].data(), in[i].size(), &rmr[i]).isOk());
  }
  void* rreq = nullptr;
  ASSERT_TRUE(p.irecvGroup(recv, 3, bufs, room, tags, rmr, &rreq).isOk());
  ASSERT_NE(rreq, nullptr);
  void* sreqs[3] = {nullptr, nullptr, nullptr};
  for (int i : {2, 0, 1}) {
    for (long k = 0; k < 1000000 && sreqs[i] == nullptr; ++k)
      ASSERT_TRUE(p.isend(send, out[i].data(), bytes[i], tags[i], smr[i], &sreqs[i]).isOk());
    ASSERT_NE(sreqs[i], nullptr);
  }
  bool sdone[3] = {false, false, false}, rdone = false;
  size_t got[3] = {1, 1, 1};
  for (long k = 0; k < 10000000 && !(rdone && sdone[0] && sdone[1] && sdone[2]); ++k) {
    for (int i = 0; i < 3; ++i)
      if (!sdone[i]) {
        ASSERT_TRUE(p.test(sreqs[i], &sdone[i], nullptr).isOk());
      }
    if (!rdone) {
      ASSERT_TRUE(p.testGroup(rreq, 3, &rdone, got).isOk());
    }
  }
  ASSERT_TRUE(rdone);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i], bytes[i]);
    EXPECT_EQ(std::count(in[i].begin(), in[i].begin() + static_cast<long>(bytes[i]),
                         static_cast<unsigned char>(0x10 + i)),
              static_cast<long>(bytes[i]));
    EXPECT_EQ(in[i][bytes[i]], 0xee);  // nothing past its message
    EXPECT_TRUE(p.deregMr(send, smr[i]).isOk());
    EXPECT_TRUE(p.deregMr(recv, rmr[i]).isOk());
  }
}

// What processNetPlugin chooses in a fresh process (it chooses once per process) with env set:
// "none", "<name> v<version>", or "error <code>: <message>"; withDevices adds the devices'
// names as Chorus numbers them, ": <name0>, <name1>, ...".
inline std::string chooseInChild(const std::vector<std::pair<const char*, const char*>>& env,
                                 bool withDevices = false) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    for (const auto& kv : env) setenv(kv.first, kv.second, 1);
    auto chosen = chorus::processNetPlugin();
    std::string out;
    if (!chosen.isOk())
      out = "error " + std::to_string(static_cast<int>(chosen.status().code())) + ": " +
            chosen.status().message();
    else if (chosen.value() == nullptr)
      out = "none";
    else
      out = std::string(chosen.value()->name()) + " v" + std::to_string(chosen.value()->version());
    for (int d = 0;
         withDevices && chosen.isOk() && chosen.value() != nullptr && d < chosen.value()->devices();
         ++d) {
      chorus::NetPlugin::Properties props;
      out += (d == 0 ? ": " : ", ") +
             (chosen.value()->properties(d, &props).isOk() ? props.name : std::string("?"));
    }
    ssize_t w = write(fds[1], out.data(), out.size());
    _exit(w == static_cast<ssize_t>(out.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string got;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return got;
}
