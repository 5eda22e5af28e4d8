#include "cuda/dev_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <utility>

#include "algorithms/double_binary_tree.h"
#include "algorithms/rd_allreduce.h"
#include "common/param.h"
#include "cuda/dev_memory.h"

namespace chorus {
namespace dev {

namespace {

// Coll holds Collective's values.
static_assert(static_cast<int>(Coll::kAllReduce) == static_cast<int>(Collective::kAllReduce) &&
                  static_cast<int>(Coll::kAllGather) == static_cast<int>(Collective::kAllGather) &&
                  static_cast<int>(Coll::kReduceScatter) ==
                      static_cast<int>(Collective::kReduceScatter) &&
                  static_cast<int>(Coll::kBroadcast) == static_cast<int>(Collective::kBroadcast) &&
                  static_cast<int>(Coll::kReduce) == static_cast<int>(Collective::kReduce),
              "Coll mirrors Collective");

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// Per ring step: a fixed cost, and the rate one channel's block moves data at.
struct ProtoCost {
  double stepUs;
  double channelGBps;
};
constexpr ProtoCost kCost[kNumProtos] = {
    {1.0, 6.0},   // LL: no fence, the flag travels with the data; half the payload per line
    {3.0, 24.0},  // Simple: a system fence and a counter round trip per slot
};
constexpr double kChannelUs = 0.3;  // each further block of the launch

Algorithm algorithmOf(Algo a) {
  switch (a) {
    case Algo::kOneShot:
      return Algorithm::kOneShot;
    case Algo::kTwoShot:
      return Algorithm::kTwoShot;
    case Algo::kTree:
      return Algorithm::kTree;
    case Algo::kRd:
      return Algorithm::kRd;
    default:
      return Algorithm::kRing;
  }
}

}  // namespace

const char* protoName(Proto p) {
  return p == Proto::kLl ? "LL" : "Simple";
}

const char* algoName(Algo a) {
  switch (a) {
    case Algo::kOneShot:
      return "oneshot";
    case Algo::kTwoShot:
      return "twoshot";
    case Algo::kTree:
      return "tree";
    case Algo::kRd:
      return "rd";
    default:
      return "ring";
  }
}

static_assert(kDevTrees == kNumTrees, "the device runs the host's two trees");

DevTreeNode devTreeNode(int nranks, int rank, int tree) {
  const TreeNode t = treeNode(nranks, rank, tree);
  DevTreeNode d;
  d.parent = t.parent;
  d.children[0] = t.children[0];
  d.children[1] = t.children[1];
  d.nchildren = t.nchildren;
  d.depth = t.depth;
  return d;
}

bool treeNeighbours(int nranks, int a, int b) {
  if (a == b) return false;
  for (int t = 0; t < kNumTrees; ++t) {
    const TreeNode n = treeNode(nranks, a, t);
    if (n.parent == b) return true;
    for (int c = 0; c < n.nchildren; ++c)
      if (n.children[c] == b) return true;
  }
  return false;
}

Result<ProtoMask> parseProtoList(const std::string& value, const std::string& source) {
  ProtoMask m;
  std::string text = trim(value);
  if (text.empty()) return m;
  bool exclude = text[0] == '^';
  if (exclude) text = text.substr(1);
  uint32_t named = 0;
  bool anyName = false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string name = lower(
        trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (name == "ll") {
      named |= 1u << static_cast<int>(Proto::kLl);
    } else if (name == "simple") {
      named |= 1u << static_cast<int>(Proto::kSimple);
    } else if (name != "ll128") {
      return invalidArgument(
          "%s: unknown protocol '%s' (accepted: LL, LL128, Simple, comma "
          "separated, ^ in front to exclude)",
          source.c_str(), name.c_str());
    }
    anyName = true;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (!anyName) return invalidArgument("%s names no protocol", source.c_str());
  m.bits = exclude ? ((1u << kNumProtos) - 1) & ~named : named;
  if (m.bits == 0)
    return invalidArgument(
        "%s leaves no protocol Chorus has (LL and Simple; LL128 is not "
        "implemented)",
        source.c_str());
  m.isSet = true;
  m.text = source;
  return m;
}

Result<ProtoMask> protoOverride() {
  ParamValue v = paramRaw("PROTO");
  if (!v.isSet || trim(v.value).empty()) return ProtoMask();
  return parseProtoList(v.value, v.source + "=" + v.value);
}

bool rdPartners(int nranks, int a, int b) {
  if (a == b || a < 0 || b < 0 || a >= nranks || b >= nranks) return false;
  for (int i = 0, p; (p = rdPartner(nranks, a, i)) >= 0; ++i)
    if (p == b) return true;
  return false;
}

double predictDeviceUs(int nranks, Collective coll, Algo algo, Proto proto, int nchannels,
                       size_t bytes, uint32_t directBytes) {
  const double n = nranks;
  const ProtoCost& c = kCost[static_cast<int>(proto)];
  const double channels = kChannelUs * (nchannels - 1);
  if ((algo == Algo::kOneShot || algo == Algo::kTwoShot) && nranks > 1) {
    // Per sequence one exchange (one-shot) or two (two-shot), a sequence moving one buffer of
    // each channel; one-shot reads every rank's whole input, two-shot about twice its own.
    const double perChannel = static_cast<double>(bytes) / nchannels;
    const double capacity =
        proto == Proto::kLl ? directBytes / sizeof(LlLine) * kLlDataBytes : directBytes;
    const double sequences = capacity > 0 ? std::max(1.0, std::ceil(perChannel / capacity)) : 1;
    const bool two = algo == Algo::kTwoShot;
    return sequences * (two ? 2 : 1) * c.stepUs +
           perChannel * (two ? 2 : n) / (c.channelGBps * 1e3) + channels;
  }
  if (algo == Algo::kTree && nranks > 1) {
    // Up and down the tree's depth (at most floor(log2 n) edges) once each; each channel's
    // block moves its slice up (children's partials in, the sum out) and down again.
    const double depth = std::floor(std::log2(n));
    return 2 * depth * c.stepUs +
           2 * static_cast<double>(bytes) / nchannels / (c.channelGBps * 1e3) + channels;
  }
  if (algo == Algo::kRd && nranks > 1) {
    // log2 p exchanges of the whole slice (p the largest power of two not above n), two more
    // where ranks past p fold in and take the result back.
    const int pw = rdPowerOfTwo(nranks);
    const double steps = std::log2(static_cast<double>(pw)) + (pw < nranks ? 2 : 0);
    return steps * (c.stepUs + static_cast<double>(bytes) / nchannels / (c.channelGBps * 1e3)) +
           channels;
  }
  // Ring steps per byte of the call, and the steps of the whole call.
  double steps = n - 1;
  double share = (n - 1) / n;  // of `bytes` each rank passes on
  if (coll == Collective::kAllReduce) {
    steps = 2 * (n - 1);
    share = 2 * (n - 1) / n;
  } else if (coll == Collective::kBroadcast || coll == Collective::kReduce) {
    share = 1;
  }
  if (nranks == 1) {  // a local copy (or scaling) of the whole buffer, no ring steps
    steps = 0;
    share = 1;
  }
  const double perChannelBytes = static_cast<double>(bytes) * share / nchannels;
  return steps * c.stepUs + perChannelBytes / (c.channelGBps * 1e3) + channels;
}

DeviceChoice chooseDevice(const DeviceShape& shape, Collective coll, size_t bytes) {
  DeviceChoice best;
  bool found = false;
  const int hi = std::max(1, std::min(shape.maxChannels, shape.nchannels));
  const int lo = std::max(1, std::min(shape.minChannels, hi));
  // The direct algorithms where the communicator has direct regions and the user allows them;
  // the ring where allowed, and whenever nothing else applies.
  // The tree and recursive doubling where the communicator has their links, on at most as
  // many channels.
  const bool allReduce = coll == Collective::kAllReduce && shape.nranks > 1;
  const bool direct = allReduce && shape.directBytes > 0;
  const bool tree = allReduce && shape.treeChannels > 0;
  const bool rd = allReduce && shape.rdChannels > 0;
  auto applies = [&](Algo a) {
    switch (a) {
      case Algo::kRing:
        return true;
      case Algo::kTree:
        return tree;
      case Algo::kRd:
        return rd;
      default:
        return direct;
    }
  };
  bool any = false;
  for (int a = 0; a < kNumAlgos; ++a) {
    const Algo algo = static_cast<Algo>(a);
    any = any || (applies(algo) && shape.algos.allows(algorithmOf(algo)));
  }
  for (int a = 0; a < kNumAlgos; ++a) {
    const Algo algo = static_cast<Algo>(a);
    if (!applies(algo)) continue;
    if (any ? !shape.algos.allows(algorithmOf(algo)) : algo != Algo::kRing) continue;
    const int top = algo == Algo::kTree ? std::min(hi, shape.treeChannels)
                    : algo == Algo::kRd ? std::min(hi, shape.rdChannels)
                                        : hi;
    const int bottom = std::min(lo, top);
    for (int p = 0; p < kNumProtos; ++p) {
      Proto proto = static_cast<Proto>(p);
      if (!shape.protos.allows(proto)) continue;
      if (algo == Algo::kTwoShot && proto == Proto::kLl) continue;  // Simple only
      for (int ch = bottom; ch <= top; ++ch) {
        double us = predictDeviceUs(shape.nranks, coll, algo, proto, ch, bytes, shape.directBytes);
        if (!found || us < best.us) {
          best = DeviceChoice{algo, proto, ch, us};
          found = true;
        }
      }
    }
  }
  if (!found) {
    // Only LL allowed and only two-shot asked for: two-shot runs with Simple rather than
    // nothing at all (the protocol is the algorithm's own).
    best = DeviceChoice{Algo::kTwoShot, Proto::kSimple, hi,
                        predictDeviceUs(shape.nranks, coll, Algo::kTwoShot, Proto::kSimple, hi,
                                        bytes, shape.directBytes)};
  }
  return best;
}

size_t deviceCallBytes(const DeviceCall& call, int nranks) {
  size_t bytes = call.count * dataTypeSize(call.type);
  if (call.coll == Collective::kAllGather || call.coll == Collective::kReduceScatter)
    bytes *= static_cast<size_t>(nranks);
  return bytes;
}

Status encodeLaunches(const DeviceShape& shape, const Comm* comm, const DeviceCall* calls, size_t n,
                      std::vector<Launch>* out) {
  Launch* current = nullptr;
  for (size_t i = 0; i < n; ++i) {
    const DeviceCall& c = calls[i];
    if (c.count == 0) continue;
    if (dataTypeSize(c.type) == 0)
      return invalidArgument("device call %zu: unknown data type %d", i, static_cast<int>(c.type));
    Work w;
    w.count = c.count;
    w.sendbuff = c.sendbuff;
    w.recvbuff = c.recvbuff;
    w.type = static_cast<uint8_t>(c.type);
    const bool copyOnly = c.coll == Collective::kAllGather || c.coll == Collective::kBroadcast;
    if (static_cast<unsigned>(c.coll) > static_cast<unsigned>(Collective::kReduce))
      return invalidArgument("device call %zu: collective %d has no device kernel", i,
                             static_cast<int>(c.coll));
    w.coll = static_cast<Coll>(c.coll);
    w.redKind = static_cast<uint8_t>(copyOnly ? RedKind::kSum : c.op.kind);
    if (!copyOnly && c.op.kind == RedKind::kPreMulSum) {
      if (c.scalarDevice != nullptr) {
        w.scalarPtr = c.scalarDevice;
      } else {
        std::memcpy(&w.scalarBits, c.op.scalar, dataTypeSize(c.type));
      }
    }
    w.rootIndex = 0;
    for (int pos = 0; pos < shape.nranks; ++pos)
      if (shape.ringRanks != nullptr && shape.ringRanks[pos] == c.root)
        w.rootIndex = static_cast<int16_t>(pos);
    DeviceChoice choice = chooseDevice(shape, c.coll, deviceCallBytes(c, shape.nranks));
    w.algo = choice.algo;
    w.proto = choice.proto;
    w.nchannels = static_cast<int16_t>(choice.nchannels);
    const bool sameKernel = current != nullptr && current->nworks < kMaxLaunchWorks &&
                            current->works[0].type == w.type &&
                            current->works[0].redKind == w.redKind;
    if (!sameKernel) {
      out->emplace_back();
      current = &out->back();
      current->comm = comm;
      current->nworks = 0;
    }
    current->works[current->nworks++] = w;
  }
  return Status::ok();
}

size_t planSendCopies(const DeviceP2p* ops, size_t n, std::vector<size_t>* at) {
  // Receive ranges by start, with the largest end among each prefix: a send [s, e) overlaps a
  // receive when one of those starting before e ends after s.
  std::vector<std::pair<uintptr_t, uintptr_t>> recvs;
  for (size_t i = 0; i < n; ++i)
    if (!ops[i].isSend && ops[i].bytes > 0) {
      const auto begin = reinterpret_cast<uintptr_t>(ops[i].recvbuff);
      recvs.emplace_back(begin, begin + ops[i].bytes);
    }
  std::sort(recvs.begin(), recvs.end());
  std::vector<uintptr_t> maxEnd(recvs.size());
  for (size_t k = 0; k < recvs.size(); ++k)
    maxEnd[k] = std::max(recvs[k].second, k > 0 ? maxEnd[k - 1] : 0);
  at->assign(n, SIZE_MAX);
  size_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!ops[i].isSend || ops[i].bytes == 0) continue;
    const auto begin = reinterpret_cast<uintptr_t>(ops[i].sendbuff);
    const auto end = begin + ops[i].bytes;
    const size_t before = static_cast<size_t>(
        std::lower_bound(recvs.begin(), recvs.end(), std::make_pair(end, uintptr_t{0})) -
        recvs.begin());
    if (before == 0 || maxEnd[before - 1] <= begin) continue;
    (*at)[i] = bytes;
    bytes += (ops[i].bytes + 255) / 256 * 256;
  }
  return bytes;
}

Proto chooseP2pProto(const ProtoMask& protos, size_t bytes) {
  // One block moves the transfer; each protocol's fixed cost once, then its rate.
  double best = 0;
  Proto chosen = Proto::kSimple;
  bool found = false;
  for (int p = 0; p < kNumProtos; ++p) {
    if (!protos.allows(static_cast<Proto>(p))) continue;
    const double us = kCost[p].stepUs + static_cast<double>(bytes) / (kCost[p].channelGBps * 1e3);
    if (!found || us < best) {
      best = us;
      chosen = static_cast<Proto>(p);
      found = true;
    }
  }
  return chosen;
}

int p2pPartsOf(const DeviceShape& shape, size_t bytes) {
  const size_t most = static_cast<size_t>(std::max(1, std::min(shape.p2pParts, kP2pParts)));
  const size_t by = shape.p2pPartBytes > 0 ? bytes / shape.p2pPartBytes : most;
  return static_cast<int>(std::max<size_t>(1, std::min(most, by)));
}

size_t p2pPartBegin(size_t bytes, int parts, int p) {
  size_t per = (bytes + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
  per = (per + 15) / 16 * 16;
  const size_t b = per * static_cast<size_t>(p);
  return b < bytes ? b : bytes;
}

Status encodeP2pLaunches(const DeviceShape& shape, const Comm* comm, int rank, const DeviceP2p* ops,
                         size_t n, std::vector<Launch>* out) {
  const int nranks = shape.nranks;
  if (rank < 0 || rank >= nranks)
    return invalidArgument("rank %d is outside [0, %d)", rank, nranks);
  // By distance: the sends to rank + d and the receives from rank - d, in call order.
  std::vector<std::vector<const DeviceP2p*>> sends(static_cast<size_t>(nranks));
  std::vector<std::vector<const DeviceP2p*>> recvs(static_cast<size_t>(nranks));
  size_t rounds = 0;
  for (size_t i = 0; i < n; ++i) {
    const DeviceP2p& op = ops[i];
    if (op.peer < 0 || op.peer >= nranks)
      return invalidArgument("rank %d: %s peer %d is outside [0, %d)", rank,
                             op.isSend ? "send" : "receive", op.peer, nranks);
    if (op.bytes == 0) continue;
    const int d =
        op.isSend ? (op.peer - rank + nranks) % nranks : (rank - op.peer + nranks) % nranks;
    std::vector<const DeviceP2p*>& list = (op.isSend ? sends : recvs)[static_cast<size_t>(d)];
    list.push_back(&op);
    rounds = std::max(rounds, list.size());
  }
  if (sends[0].size() != recvs[0].size())
    return invalidUsage(
        "rank %d: %zu send(s) to itself but %zu receive(s) from itself in one group; each send "
        "to itself needs a receive from itself of the same size",
        rank, sends[0].size(), recvs[0].size());
  for (size_t k = 0; k < sends[0].size(); ++k)
    if (sends[0][k]->bytes != recvs[0][k]->bytes)
      return invalidUsage(
          "rank %d: send %zu to itself has %zu bytes but the matching receive %zu bytes", rank, k,
          sends[0][k]->bytes, recvs[0][k]->bytes);
  // Appends the parts of a transfer (a copy takes its receive's buffer).
  auto addParts = [&](Launch* l, const DeviceP2p& op, Coll coll, void* copyTo) {
    const int parts = p2pPartsOf(shape, op.bytes);
    const Proto proto = chooseP2pProto(shape.protos, op.bytes);
    for (int p = 0; p < parts; ++p) {
      const size_t begin = p2pPartBegin(op.bytes, parts, p);
      const size_t end = p2pPartBegin(op.bytes, parts, p + 1);
      Work w;
      w.count = end - begin;
      w.sendbuff = op.sendbuff != nullptr ? static_cast<const char*>(op.sendbuff) + begin : nullptr;
      void* recv = coll == Coll::kCopy ? copyTo : op.recvbuff;
      w.recvbuff = recv != nullptr ? static_cast<char*>(recv) + begin : nullptr;
      w.coll = coll;
      w.proto = proto;
      w.type = static_cast<uint8_t>(DataType::kUint8);
      w.redKind = static_cast<uint8_t>(RedKind::kSum);
      w.nchannels = 1;
      w.peer = op.peer;
      w.part = p;
      l->works[l->nworks++] = w;
    }
  };
  for (size_t k = 0; k < rounds; ++k)
    for (int first = 0; first < nranks; first += kP2pDistancesPerLaunch) {
      Launch l;
      l.comm = comm;
      l.p2p = 1;
      l.nworks = 0;
      for (int d = first; d < std::min(nranks, first + kP2pDistancesPerLaunch); ++d) {
        const std::vector<const DeviceP2p*>& s = sends[static_cast<size_t>(d)];
        const std::vector<const DeviceP2p*>& r = recvs[static_cast<size_t>(d)];
        if (d == 0) {
          if (k < s.size()) addParts(&l, *s[k], Coll::kCopy, r[k]->recvbuff);
          continue;
        }
        if (k < s.size()) addParts(&l, *s[k], Coll::kSend, nullptr);
        if (k < r.size()) addParts(&l, *r[k], Coll::kRecv, nullptr);
      }
      if (l.nworks > 0) out->push_back(l);
    }
  return Status::ok();
}

}  // namespace dev
}  // namespace chorus
