// Host identity: ranks with equal host ids share memory and may use the shm transport.
#pragma once

#include <cstdint>
#include <string>

namespace chorus {

// Hash of hostname, kernel boot id and network namespace, so ranks in different network
// namespaces of one machine count as different hosts. CHORUS_HOSTID overrides it.
uint64_t localHostId();
// The text the hash was made from (for logs and chorus-info).
std::string localHostIdText();
// Ranks with equal machine ids run on one kernel and share its CPUs, also from different
// network namespaces or containers (hosts of their own to the transports): a hash of the kernel
// boot id. Where CHORUS_HOSTID names the host, or the boot id cannot be read, the host id.
uint64_t localMachineId();

}  // namespace chorus
