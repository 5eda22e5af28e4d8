// What processNetPlugin chooses in a fresh process (it chooses once per process) with env set:
// "none", "<name> v<version>", or "error <code>: <message>". Shared by the net plugin and IB
// network tests.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "transport/net_plugin/net_plugin.h"

inline std::string chooseInChild(const std::vector<std::pair<const char*, const char*>>& env) {
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
