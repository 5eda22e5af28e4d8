// Topology files: a LocalTopology written as JSON, so a machine's layout can be saved
// (CHORUS_TOPO_DUMP_FILE), replayed on another (CHORUS_TOPO_FILE) and kept as test fixtures.
//
// Format, version 1. Keys marked "opt" may be left out and take the default shown; every other key
// is required. Unknown keys are errors at every level, so a misspelt key never goes unnoticed.
// "numa" references (numa_node) are -1 (unknown) or the os_index of an entry of numa_nodes.
// Bus ids are "dddd:bb:dd.f" in hex (upper case is accepted and lower-cased).
//
// {
//   "chorus_topology": 1,               int, the format version; must be 1
//   "hostname": "gpu-node-07",          string
//   "host_id": "0x5c1f0e9a3b7d2461",    opt string, 64-bit hex (default "0x0")
//   "source": "hwloc",                  opt string, how it was obtained (default "")
//   "cpu_model": "AMD EPYC 7763",       opt string (default "")
//   "cores": 128,                       int >= 0, physical cores
//   "pus": 256,                         int >= 0, processing units (hardware threads)
//   "packages": [                       array, the sockets
//     {"os_index": 0,                   int >= 0, unique
//      "cpus": "0-63,128-191"}          string, Linux cpulist of PU os indices
//   ],
//   "numa_nodes": [                     array
//     {"os_index": 0,                   int >= 0, unique
//      "cpus": "0-63,128-191",          string, cpulist ("" for a memory-only node)
//      "memory_bytes": 540950548480}    int >= 0 (0: unknown)
//   ],
//   "caches": [                         opt array (default [])
//     {"level": 3,                      int 1..5
//      "type": "unified",               string: "data", "instruction" or "unified"
//      "size_bytes": 33554432,          int >= 0
//      "shared_by_pus": 16,             int >= 0, PUs using one instance
//      "count": 8}                      int >= 0, instances on the host
//   ],
//   "pci_devices": [                    opt array (default []); PCI-to-PCI bridges are not listed
//     {"bus_id": "0000:c1:00.0",        string bus id, unique
//      "vendor_id": "0x10de",           string, 16-bit hex
//      "device_id": "0x20b5",           string, 16-bit hex
//      "class": "0x0302",               string, 16-bit hex (base class, subclass)
//      "numa_node": 1,                  opt numa reference (default -1)
//      "link_width": 16,                opt int, lanes (default -1: unknown)
//      "link_speed_gts": 16,            opt number >= 0, GT/s per lane (default 0: unknown)
//      "upstream": ["0000:c0:01.1"],    opt array of bus ids, bridges above it nearest first
//      "host_bridge": "0000:c0"}        opt string "dddd:bb", the root complex (default "")
//   ],
//   "net_interfaces": [                 opt array (default [])
//     {"name": "ens1f0",                string, unique
//      "up": true,                      bool
//      "speed_mbps": 100000,            opt int, -1 unknown (default -1)
//      "mtu": 9000,                     opt int >= 0 (default 0)
//      "addresses": [                   opt array (default [])
//        {"family": "ipv4",             string: "ipv4" or "ipv6"
//         "address": "10.0.1.7",        string, numeric address of that family
//         "prefix": 24}                 int, 0..32 (ipv4) or 0..128 (ipv6)
//      ],
//      "pci_bus_id": "0000:c1:00.0",    opt bus id (default "": not a PCI device)
//      "numa_node": 1,                  opt numa reference (default -1)
//      "loopback": false,               opt bool (default false)
//      "virtual": false}                opt bool (default false)
//   ],
//   "ib_devices": [                     opt array (default [])
//     {"name": "mlx5_0",                string, unique
//      "node_guid": "b859:9f03:00d4:1e2a", opt string (default "")
//      "pci_bus_id": "0000:c1:00.0",    opt bus id (default "")
//      "numa_node": 1,                  opt numa reference (default -1)
//      "ports": [                       array
//        {"port": 1,                    int >= 1
//         "state": "ACTIVE",            string
//         "rate_gbps": 200,             opt number >= 0 (default 0: unknown)
//         "link_layer": "InfiniBand",   string: "InfiniBand" or "Ethernet"
//         "gids": [                     opt array (default [])
//           {"index": 0, "gid": "fe80:0000:0000:0000:ba59:9f03:00d4:1e2a",
//            "type": "RoCE v2"}]}     (type: opt, "IB/RoCE v1" or "RoCE v2")
//      ]}
//   ],
//   "gpus": [                           opt array (default []), ordered by index
//     {"index": 0,                      int, equal to the position in the array
//      "name": "NVIDIA H100 80GB HBM3", string
//      "pci_bus_id": "0000:18:00.0",    bus id
//      "numa_node": 0,                  opt numa reference (default -1)
//      "p2p": [false, true, ...],       opt array of bools, one per GPU (default: all false)
//      "nvlinks": [0, 2, ...],          opt array of ints >= 0, one per GPU (default: all 0)
//      "nvswitch_links": 18}            opt int >= 0 (default 0)
//   ]
// }
#pragma once

#include <string>

#include "common/status.h"
#include "topo/topology.h"

namespace chorus {

constexpr int kTopologyFileVersion = 1;

// The JSON text of a topology (stable key order, ends with a newline).
std::string dumpTopology(const LocalTopology& topo);
// Reads the JSON text; errors read "<sourceName>:<line>:<column>: <key path>: <problem>".
Result<LocalTopology> parseTopology(const std::string& text, const std::string& sourceName);

Result<LocalTopology> loadTopologyFile(const std::string& path);
// Writes through a temporary file and a rename, so readers never see half a file.
Status dumpTopologyFile(const LocalTopology& topo, const std::string& path);

// The first line where the dumps of two topologies differ ("line 12: ... vs ..."); empty when
// they are equal. For test failure messages.
std::string describeTopologyDifference(const LocalTopology& a, const LocalTopology& b);

}  // namespace chorus
