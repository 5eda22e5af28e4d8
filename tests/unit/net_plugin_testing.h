// Helpers of the net plugin and IB network tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "transport/net_plugin/net_abi.h"
#include "transport/net_plugin/net_plugin.h"

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
