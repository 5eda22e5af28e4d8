"""Two network namespaces joined by a veth pair, for compare.py --netns.

Each benchmark then runs one rank per namespace: the ranks talk TCP over the veth link as two
hosts would (no shared memory), on this machine's cores. Needs root (ip netns); every address
stays inside the namespaces.
"""

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
NSRUN = os.path.join(HERE, "nsrun.sh")
IFNAME = "cmp0"  # the veth end's name in both namespaces


def rate_bits(rate):
    """Bits per second of a tc rate such as 1gbit, 500mbit or 25gbit."""
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    for unit, scale in units.items():
        if rate.endswith(unit) and rate[: -len(unit)].replace(".", "", 1).isdigit():
            return float(rate[: -len(unit)]) * scale
    raise ValueError(f"--netns-rate '{rate}': expected a rate such as 1gbit or 500mbit")


class NetnsPair:
    def __init__(self, subnet, rate=None):
        parts = subnet.split(".")
        if len(parts) != 3 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
            raise ValueError(f"--netns-subnet '{subnet}': expected three octets, e.g. 10.78.0")
        tag = f"{os.getpid() % 100000}"
        self.names = [f"cmpA{tag}", f"cmpB{tag}"]
        self.addrs = [f"{subnet}.1", f"{subnet}.2"]
        self.cidr = f"{subnet}.0/24"
        self._veth = [f"cva{tag}", f"cvb{tag}"]
        self.up = False
        # tbf on each end's egress shapes both directions; a burst of 10 ms of the rate at
        # least, so that the kernel's timer granularity does not cap it below the rate.
        self.rate = rate
        self.bits = rate_bits(rate) if rate else None

    def _ip(self, *args):
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def setup(self):
        if os.geteuid() != 0:
            raise RuntimeError("--netns needs root (ip netns)")
        try:
            for ns in self.names:
                self._ip("netns", "add", ns)
            self.up = True
            self._ip("link", "add", self._veth[0], "type", "veth", "peer", "name", self._veth[1])
            for ns, dev, addr in zip(self.names, self._veth, self.addrs):
                self._ip("link", "set", dev, "netns", ns)
                self._ip("-n", ns, "link", "set", dev, "name", IFNAME)
                self._ip("-n", ns, "addr", "add", f"{addr}/24", "dev", IFNAME)
                self._ip("-n", ns, "link", "set", IFNAME, "up")
                self._ip("-n", ns, "link", "set", "lo", "up")
                if self.rate:
                    burst = max(256 * 1024, int(self.bits / 8 / 100))
                    self._ip("netns", "exec", ns, "tc", "qdisc", "add", "dev", IFNAME, "root",
                             "tbf", "rate", self.rate, "burst", str(burst), "latency", "50ms")
        except subprocess.CalledProcessError as e:
            self.teardown()
            raise RuntimeError(f"setting up namespaces: {' '.join(e.cmd)}: {e.stderr.strip()}")

    def teardown(self):
        if not self.up:
            return
        for ns in self.names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.up = False

    def describe(self):
        link = (f", each direction shaped with tbf to {self.rate} ({self.bits / 8e9:.3g} GB/s)"
                if self.rate else "")
        return (f"two network namespaces ({self.names[0]} {self.addrs[0]}, {self.names[1]} "
                f"{self.addrs[1]}) joined by a veth pair{link}, one rank in each")

    # ---- commands ---------------------------------------------------------------------------

    def pair(self, cmd):
        """cmd run as rank 0 and rank 1, one per namespace (Chorus's perf tools, gloo_bench)."""
        return [NSRUN, "pair", self.names[0], self.names[1], self.addrs[0]] + cmd

    def hosts_env(self):
        return {"NSRUN_HOSTS": " ".join(f"{a}={n}" for a, n in zip(self.addrs, self.names))}

    def in_first(self, cmd):
        """cmd (an MPI launcher) run in the first namespace, under its own host name."""
        return ["ip", "netns", "exec", self.names[0], "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.names[0]] + cmd

    def openmpi_args(self):
        """Ranks on both hosts over the TCP BTL (no shared-memory transport between them)."""
        return ["--host", ",".join(self.addrs), "--bind-to", "none",
                "--mca", "plm_rsh_agent", NSRUN, "--mca", "pml", "ob1",
                "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", self.cidr,
                "--mca", "oob_tcp_if_include", self.cidr]

    def mpich_args(self):
        """Ranks on both hosts, UCX restricted to TCP."""
        return ["-hosts", ",".join(self.addrs), "-launcher", "ssh",
                "-launcher-exec", NSRUN, "-genv", "UCX_TLS", "tcp,self"]
