#include "device/comm_host_links.h"

#include <cstdlib>
#include <thread>

#include "bootstrap/bootstrap.h"

namespace chorus {
namespace dev {

CommHostLinks::CommHostLinks(int nranks, bool tcp, int ringChannels, bool p2p, int extraLinks)
    : nranks_(nranks),
      comms_(static_cast<size_t>(nranks)),
      links_(static_cast<size_t>(nranks), std::vector<HostLinks>(kHostChannels)) {
  if (tcp) setenv("CHORUS_SHM_DISABLE", "1", 1);
  Result<UniqueIdInfo> id = createUniqueId();
  if (!id.isOk()) {
    error_ = id.status().message();
    unsetenv("CHORUS_SHM_DISABLE");
    return;
  }
  std::vector<std::string> failures(static_cast<size_t>(nranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      const size_t me = static_cast<size_t>(r);
      Result<std::unique_ptr<Communicator>> c =
          Communicator::create(id.value(), nranks, r, CommOptions());
      if (!c.isOk()) {
        failures[me] = c.status().message();
        return;
      }
      comms_[me] = c.take();
      auto connect = [&](int h, const std::vector<int>& from, const std::vector<int>& to) {
        Status s = comms_[me]->connectDeviceHost(h, from, to, &links_[me][static_cast<size_t>(h)]);
        if (!s.isOk() && failures[me].empty()) failures[me] = s.message();
      };
      if (nranks < 2) return;
      for (int ch = 0; ch < ringChannels; ++ch)
        for (int p = 0; p < kNumProtos; ++p)
          connect(hostRingChannel(ch, p), {(r + nranks - 1) % nranks}, {(r + 1) % nranks});
      std::vector<int> others;
      for (int o = 0; o < nranks; ++o)
        if (o != r) others.push_back(o);
      for (int part = 0; part < kP2pParts + extraLinks; ++part)
        for (int p = 0; p < kNumProtos && (p2p || part >= kP2pParts); ++p)
          connect(hostP2pChannel(part, p), others, others);
    });
  for (std::thread& t : threads) t.join();
  unsetenv("CHORUS_SHM_DISABLE");
  for (int r = 0; r < nranks && error_.empty(); ++r)
    if (!failures[static_cast<size_t>(r)].empty())
      error_ = "rank " + std::to_string(r) + ": " + failures[static_cast<size_t>(r)];
}

CommHostLinks::~CommHostLinks() {
  // Closed in parallel: each waits for its peers' last slots.
  std::vector<std::thread> threads;
  for (auto& c : comms_) threads.emplace_back([&c] { c.reset(); });
  for (std::thread& t : threads) t.join();
}

bool CommHostLinks::link(int sender, int receiver, int channel, int proto, SendConnector** send,
                         RecvConnector** recv) {
  const size_t h = static_cast<size_t>(channel < 0 ? hostP2pChannel(-1 - channel, proto)
                                                   : hostRingChannel(channel, proto));
  *send = links_[static_cast<size_t>(sender)][h].send.empty()
              ? nullptr
              : links_[static_cast<size_t>(sender)][h].send[static_cast<size_t>(receiver)];
  *recv = links_[static_cast<size_t>(receiver)][h].recv.empty()
              ? nullptr
              : links_[static_cast<size_t>(receiver)][h].recv[static_cast<size_t>(sender)];
  if (*send == nullptr || *recv == nullptr) return false;
  ++supplied_;
  return true;
}

}  // namespace dev
}  // namespace chorus
