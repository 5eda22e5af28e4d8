#!/usr/bin/python3
"""Side-by-side bus bandwidth of Chorus, Open MPI, MPICH and Gloo on one collective.

Runs each library's benchmark (Chorus's <coll>_perf under chorusrun, mpi_bench under each MPI's
launcher, gloo_bench.py) interleaved, round after round, and a concurrent memcpy reference;
prints per size the median busbw of every library, the best peer and the median of the
per-round ratios Chorus / best peer, as a markdown table; optionally plots busbw against size.
"""

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

import netns

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
COLLS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
PEERS = ("openmpi", "mpich", "gloo")
LABELS = {"chorus": "Chorus", "chorus-window": "Chorus, windows", "openmpi": "Open MPI",
          "mpich": "MPICH", "gloo": "Gloo", "minimal": "minimal 2-rank"}
# Chorus with its buffers from ncclMemAlloc in symmetric windows (the perf tools' -R 2), which
# ranks on one host read from each other in place.
WINDOW_LIB = "chorus-window"
EXIT_UNSUPPORTED = 3


def parse_size(text):
    units = {"k": 1, "m": 2, "g": 3}
    s = text.strip()
    scale = 1
    if s and s[-1].lower() in units:
        scale = 1 << (10 * units[s[-1].lower()])
        s = s[:-1]
    try:
        return int(float(s) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size '{text}': expected e.g. 8, 64K, 1M, 2G")


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--coll", default="all_reduce", choices=COLLS)
    p.add_argument("-n", "--nranks", type=int, default=2)
    p.add_argument("-b", "--minbytes", type=parse_size, default=8)
    p.add_argument("-e", "--maxbytes", type=parse_size, default=256 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=4,
                   help="size factor; the largest size is always included (default 4)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--libs", default="chorus,openmpi,mpich,gloo",
                   help="comma list of chorus, chorus-window (buffers in symmetric windows, "
                        "-R 2), openmpi, mpich, gloo, minimal (default: chorus and the peers)")
    p.add_argument("--minimal", action="store_true",
                   help="also run minimal_allreduce.c, a dedicated two-process shared-memory "
                        "all-reduce, as a reference line (all_reduce, -n 2, one host)")
    p.add_argument("--algos", default="",
                   help="also run Chorus with each CHORUS_ALGO in this comma list, "
                        "e.g. ring,tree,oneshot,twoshot (all_reduce)")
    p.add_argument("--bytes-per-size", type=parse_size, default=1 << 30,
                   help="data per timed measurement: -n = this / size, clamped (default 1G)")
    p.add_argument("--min-iters", type=int, default=5)
    p.add_argument("--max-iters", type=int, default=200)
    p.add_argument("--fixed-iters", type=int, default=0,
                   help="one sweep over every size per library and round with this -n "
                        "(as nccl-tests runs), instead of -n scaled by size")
    p.add_argument("--average", type=int, default=1, choices=range(4),
                   help="time across ranks, as the perf tools' -a (default 1: mean)")
    p.add_argument("--inplace", action="store_true",
                   help="compare the in-place columns instead of out-of-place")
    p.add_argument("--check", action="store_true",
                   help="validate every size in every run (-c 1; slower)")
    p.add_argument("--root", type=int, default=0, help="broadcast root")
    p.add_argument("--time-below", type=parse_size, default=64 << 10,
                   help="also tabulate median times for sizes up to this (default 64K)")
    p.add_argument("--no-bound", action="store_true",
                   help="skip the references (memcpy bound, barrier floor, transfer reference)")
    p.add_argument("--bound-size", type=parse_size, default=256 << 20,
                   help="buffer each memcpy process copies (default 256M)")
    p.add_argument("--build", default=os.path.join(REPO, "build"),
                   help="Chorus build directory (default <repo>/build)")
    p.add_argument("--peers-build", default=None,
                   help="where mpi_bench and memcpy_bound are compiled (default BUILD/peers)")
    p.add_argument("--python", default="/usr/bin/python3", help="Python with torch, for gloo")
    p.add_argument("--openmpi-args", default="", help="extra mpirun.openmpi arguments")
    p.add_argument("--mpich-args", default="", help="extra mpirun.mpich arguments")
    p.add_argument("--netns", action="store_true",
                   help="two ranks in two network namespaces joined by a veth pair (TCP as "
                        "between two hosts; needs root; no memcpy reference)")
    p.add_argument("--netns-rate", default=None,
                   help="shape the namespaces' link with tbf to this rate (e.g. 1gbit; both "
                        "directions; default unshaped)")
    p.add_argument("--netns-subnet", default="10.78.0",
                   help="the /24 the namespaces' addresses come from (default 10.78.0)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per benchmark run")
    p.add_argument("--out", help="also write the markdown report here")
    p.add_argument("--plot", help="PNG: busbw against size, one line per library")
    p.add_argument("--algo-plot", help="PNG: busbw of each CHORUS_ALGO against size")
    p.add_argument("--json", help="write every run's rows here")
    p.add_argument("--log-dir", help="keep each run's output here (default PEERS_BUILD/logs/..)")
    p.add_argument("--spread", action="store_true", help="show min-max across rounds in cells")
    p.add_argument("--logy", action="store_true", help="logarithmic busbw axis on the plots")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = p.parse_args(argv)
    a.libs = [x for x in a.libs.split(",") if x]
    for lib in a.libs:
        if lib not in LABELS:
            p.error(f"unknown library '{lib}' (chorus, chorus-window, openmpi, mpich, gloo, "
                    f"minimal)")
    if a.minimal and "minimal" not in a.libs:
        a.libs.append("minimal")
    if "minimal" in a.libs and (a.coll != "all_reduce" or a.nranks != 2 or a.netns):
        p.error("--minimal is a two-process shared-memory all-reduce: --coll all_reduce, -n 2, "
                "no --netns")
    a.algos = [x for x in a.algos.split(",") if x]
    if a.nranks < 1 or a.rounds < 1 or a.stepfactor < 2 or a.minbytes > a.maxbytes:
        p.error("need --nranks >= 1, --rounds >= 1, -f >= 2 and -b <= -e")
    if a.min_iters < 1 or a.max_iters < a.min_iters:
        p.error("need 1 <= --min-iters <= --max-iters")
    a.peers_build = a.peers_build or os.path.join(a.build, "peers")
    a.ns = None
    if a.netns_rate and not a.netns:
        p.error("--netns-rate shapes the --netns link: give --netns too")
    if a.netns:
        if a.nranks != 2:
            p.error("--netns runs one rank in each of two namespaces: -n 2")
        a.no_bound = True  # a memory-bandwidth reference says nothing about a TCP link
        try:
            a.ns = netns.NetnsPair(a.netns_subnet, a.netns_rate)
        except ValueError as e:
            p.error(str(e))
    return a


# ---- the plan: sizes, iteration counts and one command per band of sizes --------------------

def size_list(a):
    out, s = [], a.minbytes
    while s <= a.maxbytes:
        out.append(s)
        s = max(s * a.stepfactor, 1)
    if out[-1] != a.maxbytes:
        out.append(a.maxbytes)
    return out


def exchange_sizes(a):
    """The sizes exchange_bound measures: those of the sweep's geometric grid from 4 KiB (its
    smallest block) up, which its own -b/-e/-f reproduce."""
    out, s = [], a.minbytes
    while s <= a.maxbytes:
        if s >= 4096:
            out.append(s)
        s *= a.stepfactor
    return out


def iters_for(a, size):
    if a.fixed_iters > 0:
        return a.fixed_iters
    return max(a.min_iters, min(a.max_iters, a.bytes_per_size // max(size, 1)))


def bands(a):
    """Consecutive sizes sharing an iteration count run in one invocation (-b/-e/-f)."""
    groups = []
    for s in size_list(a):
        n = iters_for(a, s)
        fits = groups and groups[-1]["iters"] == n and groups[-1]["sizes"][-1] * a.stepfactor == s
        if fits:
            groups[-1]["sizes"].append(s)
        else:
            groups.append({"iters": n, "sizes": [s]})
    for g in groups:
        g["warmup"] = max(1, min(5, g["iters"] // 20))
    return groups


def sweep_args(a, band):
    return ["-b", str(band["sizes"][0]), "-e", str(band["sizes"][-1]), "-f", str(a.stepfactor),
            "-n", str(band["iters"]), "-w", str(band["warmup"]), "-c", "1" if a.check else "0",
            "-a", str(a.average)]


class Runner:
    """Builds each library's command and environment for one band."""

    def __init__(self, a):
        self.a = a
        self.chorusrun = os.path.join(a.build, "tools", "chorusrun")
        self.perf = os.path.join(a.build, "perf", f"{a.coll}_perf")

    def command(self, lib, band):
        a, env = self.a, {}
        args = sweep_args(a, band)
        inplace = ["-I", "1" if a.inplace else "0"]
        if a.coll == "broadcast":
            args += ["-r", str(a.root)]
        ns = a.ns
        if lib == WINDOW_LIB:
            args = args + ["-R", "2"]
        if lib in ("chorus", WINDOW_LIB) or lib.startswith("chorus:"):
            env["CHORUS_HOST_COMM"] = "1"
            if lib.startswith("chorus:"):
                env["CHORUS_ALGO"] = lib.split(":", 1)[1]
            if ns:
                return ns.pair([self.perf] + args), env
            return [self.chorusrun, "-n", str(a.nranks), "--no-prefix", self.perf] + args, env
        if lib == "openmpi":
            launcher = ["mpirun.openmpi", "-np", str(a.nranks)]
            if a.nranks > (os.cpu_count() or 1):
                launcher.append("--oversubscribe")
            if os.geteuid() == 0:
                env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            if ns:
                launcher += ns.openmpi_args()
                env.update(ns.hosts_env())
            launcher += shlex.split(a.openmpi_args)
            exe = os.path.join(a.peers_build, "mpi_bench.openmpi")
            cmd = launcher + [exe, a.coll] + args + inplace
            return (ns.in_first(cmd) if ns else cmd), env
        if lib == "mpich":
            launcher = ["mpirun.mpich", "-n", str(a.nranks)]
            if ns:
                launcher += ns.mpich_args()
                env.update(ns.hosts_env())
            launcher += shlex.split(a.mpich_args)
            exe = os.path.join(a.peers_build, "mpi_bench.mpich")
            cmd = launcher + [exe, a.coll] + args + inplace
            return (ns.in_first(cmd) if ns else cmd), env
        if lib == "gloo":
            script = os.path.join(HERE, "gloo_bench.py")
            if ns:
                env["GLOO_SOCKET_IFNAME"] = netns.IFNAME
                return ns.pair([a.python, script, a.coll] + args + inplace), env
            return [a.python, script, a.coll, "--nranks", str(a.nranks)] + args + inplace, env
        if lib == "minimal":
            return [os.path.join(a.peers_build, "minimal_allreduce")] + args, env
        raise ValueError(lib)

    def bound_command(self):
        exe = os.path.join(self.a.peers_build, "memcpy_bound")
        return [exe, "-p", str(self.a.nranks), "-s", str(self.a.bound_size), "-r", "3", "-k", "2"]

    def exchange_command(self):
        """exchange_bound over the sizes of the sweep from 4 KiB (its smallest block) up."""
        exe = os.path.join(self.a.peers_build, "exchange_bound")
        sizes = exchange_sizes(self.a)
        if not sizes:
            return None
        return [exe, "-p", str(self.a.nranks), "-b", str(sizes[0]), "-e", str(sizes[-1]),
                "-f", str(self.a.stepfactor)]

    def floor_command(self):
        exe = os.path.join(self.a.peers_build, "barrier_floor")
        return [exe, "-p", str(self.a.nranks), "-n", "20000", "-r", "5"]


# ---- building the peers' benchmarks ---------------------------------------------------------

def build_peers(a, libs):
    """Compiles mpi_bench with each MPI's wrapper, minimal_allreduce and the references
    (memcpy_bound, barrier_floor, exchange_bound), when missing or stale."""
    os.makedirs(a.peers_build, exist_ok=True)
    jobs = []
    mpi_src = os.path.join(HERE, "mpi_bench.c")
    for lib in ("openmpi", "mpich"):
        if lib in libs:
            jobs.append((lib, [f"mpicc.{lib}", "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L",
                               "-o", os.path.join(a.peers_build, f"mpi_bench.{lib}"), mpi_src,
                               "-lm"], mpi_src, os.path.join(a.peers_build, f"mpi_bench.{lib}")))
    if "minimal" in libs:
        src = os.path.join(HERE, "minimal_allreduce.c")
        out = os.path.join(a.peers_build, "minimal_allreduce")
        jobs.append(("minimal", ["cc", "-O2", "-std=c11", "-o", out, src], src, out))
    if not a.no_bound:
        src = os.path.join(HERE, "memcpy_bound.c")
        out = os.path.join(a.peers_build, "memcpy_bound")
        jobs.append(("bound", ["cc", "-O2", "-std=c11", "-pthread", "-o", out, src], src, out))
        src = os.path.join(HERE, "barrier_floor.c")
        out = os.path.join(a.peers_build, "barrier_floor")
        jobs.append(("bound", ["cc", "-O2", "-std=c11", "-o", out, src], src, out))
        src = os.path.join(HERE, "exchange_bound.c")
        out = os.path.join(a.peers_build, "exchange_bound")
        jobs.append(("bound", ["cc", "-O2", "-std=c11", "-o", out, src], src, out))
    unavailable = {}
    for name, cmd, src, out in jobs:
        if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(src):
            continue
        if shutil.which(cmd[0]) is None:
            unavailable[name] = f"{cmd[0]} not found (apt-get install " + \
                ("openmpi-bin libopenmpi-dev)" if name == "openmpi" else
                 "mpich libmpich-dev)" if name == "mpich" else "gcc)")
            continue
        print("# building: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
        if a.dry_run:
            continue
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            unavailable[name] = f"build failed: {r.stderr.strip()[-500:]}"
    return unavailable


# ---- running and parsing --------------------------------------------------------------------

def parse_rows(text, inplace):
    """Rows of the nccl-tests format: size -> (busbw, time in us, #wrong)."""
    rows = {}
    base = 9 if inplace else 5
    for line in text.splitlines():
        f = line.split()
        if len(f) < base + 4 or not f[0].isdigit() or line.lstrip().startswith("#"):
            continue
        try:
            t, busbw = float(f[base]), float(f[base + 2])
        except ValueError:
            continue
        wrong = f[base + 3]
        rows[int(f[0])] = {"busbw": busbw, "time_us": t,
                           "wrong": None if wrong == "N/A" else int(wrong)}
    return rows


def run_one(cmd, env, timeout, log_path):
    """Runs one benchmark in its own process group; returns (status, stdout, seconds)."""
    full_env = dict(os.environ, **env)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        status = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        status = "timeout"
    seconds = time.monotonic() - start
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) +
                  (" " if env else "") + " ".join(shlex.quote(c) for c in cmd) + "\n")
        log.write(f"# status {status}, {seconds:.1f} s\n{out}\n# stderr\n{err}\n")
    return status, out, seconds


def header_line(text):
    for line in text.splitlines():
        if line.startswith("# nccl-tests-compatible") or line.startswith("# mpi_bench") or \
                line.startswith("# gloo_bench") or line.startswith("# minimal_allreduce"):
            return " ".join(line[2:].split())
    return None


def read_loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def run_reference(a, res, cmd, name, log_path, r, parse=None):
    """Runs one of the reference programs; returns its "key value" result lines as floats (or
    what parse makes of its output), or None (dry run, or failed: then noted in
    res["failures"])."""
    if a.dry_run:
        print(" ".join(shlex.quote(c) for c in cmd))
        return None
    status, out, sec = run_one(cmd, {}, a.timeout, log_path)
    res["seconds"]["bound"] += sec
    vals = {}
    if parse is not None:
        vals = parse(out)
    else:
        for line in out.splitlines():
            m = re.match(r"^([A-Za-z_]+) ([-0-9.]+)$", line.strip())
            if m:
                vals[m.group(1)] = float(m.group(2))
    if status != 0 or not vals:
        res["failures"].append(f"round {r} {name}: status {status}")
        return None
    return vals


def parse_exchange(text):
    """exchange_bound's rows: size -> {"pull": GB/s, "staged": GB/s}."""
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 8 and f[0].isdigit() and not line.lstrip().startswith("#"):
            try:
                rows[int(f[0])] = {"pull": float(f[6]), "staged": float(f[7])}
            except ValueError:
                continue
    return rows


def measure(a, libs):
    runner = Runner(a)
    plan = bands(a)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    log_dir = a.log_dir or os.path.join(a.peers_build, "logs", f"{a.coll}-{stamp}")
    if not a.dry_run:
        os.makedirs(log_dir, exist_ok=True)
    res = {"runs": {lib: {} for lib in libs}, "bound": [], "floor": [], "exchange": [],
           "failures": [],
           "versions": {},
           "unsupported": {}, "seconds": {lib: 0.0 for lib in libs + ["bound"]},
           "plan": plan, "log_dir": log_dir, "load_before": read_loadavg()}
    for r in range(a.rounds):
        if not a.no_bound:
            vals = run_reference(a, res, runner.bound_command(), "memcpy_bound",
                                 os.path.join(log_dir, f"r{r}-bound.log"), r)
            if vals is not None and "bound_busbw_GBps" in vals:
                res["bound"].append({k: v for k, v in vals.items() if k.endswith("_GBps")})
            vals = run_reference(a, res, runner.floor_command(), "barrier_floor",
                                 os.path.join(log_dir, f"r{r}-floor.log"), r)
            if vals is not None and "barrier_us" in vals:
                res["floor"].append(vals["barrier_us"])
            cmd = runner.exchange_command()
            if cmd is not None and a.nranks >= 2:
                vals = run_reference(a, res, cmd, "exchange_bound",
                                     os.path.join(log_dir, f"r{r}-exchange.log"), r,
                                     parse=parse_exchange)
                if vals is not None:
                    res["exchange"].append(vals)
        for bi, band in enumerate(plan):
            for lib in libs:
                if lib in res["unsupported"]:
                    continue
                cmd, env = runner.command(lib, band)
                if a.dry_run:
                    print(" ".join(f"{k}={v}" for k, v in env.items()) + (" " if env else "") +
                          " ".join(shlex.quote(c) for c in cmd))
                    continue
                log = os.path.join(log_dir, f"r{r}-b{bi}-{lib.replace(':', '-')}.log")
                status, out, sec = run_one(cmd, env, a.timeout, log)
                res["seconds"][lib] += sec
                res["versions"].setdefault(lib, header_line(out))
                if status == EXIT_UNSUPPORTED and lib == "gloo":
                    res["unsupported"][lib] = header_line(out) or "not supported"
                    continue
                rows = parse_rows(out, a.inplace)
                if status != 0:
                    res["failures"].append(f"round {r} {lib} sizes {human(band['sizes'][0])}.."
                                           f"{human(band['sizes'][-1])}: status {status} "
                                           f"(log: {log})")
                for size, row in rows.items():
                    if row["wrong"]:
                        res["failures"].append(f"round {r} {lib} size {size}: "
                                               f"{row['wrong']} wrong elements")
                    res["runs"][lib].setdefault(size, []).append(dict(row, round=r))
            if not a.dry_run:
                print(f"# round {r + 1}/{a.rounds}: sizes {human(band['sizes'][0])}.."
                      f"{human(band['sizes'][-1])} done", file=sys.stderr, flush=True)
    res["load_after"] = read_loadavg()
    return res


# ---- summary --------------------------------------------------------------------------------

def median_of(runs, key):
    vals = [x[key] for x in runs]
    return statistics.median(vals) if vals else None


def per_round(runs, key):
    return {x["round"]: x[key] for x in runs}


def round_ratio(res, size, lib, row):
    """Median over rounds of best peer's time / lib's time at size (None without both)."""
    if not row["best"] or lib not in row["time"]:
        return None
    mine = per_round(res["runs"][lib][size], "time_us")
    theirs = per_round(res["runs"][row["best"]][size], "time_us")
    ratios = [theirs[r] / mine[r] for r in mine if r in theirs and mine[r] > 0]
    return statistics.median(ratios) if ratios else None


def summarize(a, res, main_lib="chorus", peers=PEERS):
    """Per size: medians, the best peer (fastest median) and the median per-round busbw ratio
    main / best peer."""
    table = []
    for size in size_list(a):
        row = {"size": size, "busbw": {}, "time": {}, "spread": {}}
        for lib, runs in res["runs"].items():
            got = runs.get(size, [])
            if got:
                row["busbw"][lib] = median_of(got, "busbw")
                row["time"][lib] = median_of(got, "time_us")
                vals = [x["busbw"] for x in got]
                row["spread"][lib] = (min(vals), max(vals))
        # Same size and bus factor: busbw ratios are time ratios, which keep their precision
        # at small sizes where busbw prints as 0.00.
        cands = [p for p in peers if p in row["time"]]
        row["best"] = min(cands, key=lambda p: row["time"][p]) if cands else None
        row["ratio"] = round_ratio(res, size, main_lib, row)
        row["window_ratio"] = round_ratio(res, size, WINDOW_LIB, row)
        table.append(row)
    return table


def fmt(v, digits=2):
    return "n/a" if v is None else f"{v:.{digits}f}"


def cell(row, lib, spread):
    v = row["busbw"].get(lib)
    if v is None:
        return "n/a"
    if spread:
        lo, hi = row["spread"][lib]
        return f"{v:.2f} ({lo:.2f}-{hi:.2f})"
    return f"{v:.2f}"


def label(lib):
    if lib.startswith("chorus:"):
        return "Chorus " + lib.split(":", 1)[1]
    return LABELS.get(lib, lib)


def exchange_median(res, size, key="staged"):
    vals = [r[size][key] for r in res["exchange"] if size in r]
    return statistics.median(vals) if vals else None


def report(a, res, libs, table):
    peers = [p for p in libs if p in PEERS]
    bound = statistics.median([b["bound_busbw_GBps"] for b in res["bound"]]) \
        if res["bound"] else None
    lines = []
    mode = "in-place" if a.inplace else "out-of-place"
    lines.append(f"## {a.coll}, {a.nranks} ranks, float32, {mode}: busbw (GB/s)")
    lines.append("")
    if a.ns:
        lines.append(f"Ranks: {a.ns.describe()}; Open MPI over its TCP BTL (pml ob1), MPICH "
                     f"with UCX_TLS=tcp,self, Gloo over the veth.")
        lines.append("")
    lines.append(f"Median over {a.rounds} interleaved rounds; sizes {human(size_list(a)[0])} to "
                 f"{human(size_list(a)[-1])}; time per call averaged over -n iterations "
                 + (f"(-n = {a.fixed_iters}), then " if a.fixed_iters > 0 else
                    f"(-n = {human(a.bytes_per_size)} / size, clamped to "
                    f"[{a.min_iters}, {a.max_iters}]), then ")
                 + f"{['rank 0', 'mean', 'min', 'max'][a.average]} over ranks.")
    lines.append("")
    cols = [label(l) for l in libs] + ["best peer", "Chorus / best peer"]
    windows = WINDOW_LIB in libs
    if windows:
        cols.append("windows / best peer")
    if bound is not None and "chorus" in libs:
        cols.append("Chorus / bound")
    transfer = bool(res["exchange"])
    if transfer:
        cols += ["pull", "staged"]
        if "chorus" in libs:
            cols.append("Chorus / pull")
    lines.append("| size | " + " | ".join(cols) + " |")
    lines.append("|---:|" + "---:|" * len(cols))
    for row in table:
        cells = [cell(row, lib, a.spread) for lib in libs]
        cells.append(label(row["best"]) if row["best"] else "n/a")
        cells.append(fmt(row["ratio"]))
        if windows:
            cells.append(fmt(row["window_ratio"]))
        if bound is not None and "chorus" in libs:
            c = row["busbw"].get("chorus")
            cells.append(fmt(c / bound if c is not None and bound > 0 else None))
        if transfer:
            x = exchange_median(res, row["size"], "pull")
            cells += [fmt(x), fmt(exchange_median(res, row["size"]))]
            if "chorus" in libs:
                c = row["busbw"].get("chorus")
                cells.append(fmt(c / x if c is not None and x else None))
        lines.append(f"| {human(row['size'])} | " + " | ".join(cells) + " |")
    small = [row for row in table if row["size"] <= a.time_below]
    if small:
        lines += ["", f"Median time per call (us), sizes up to {human(a.time_below)}:", ""]
        lines.append("| size | " + " | ".join(label(l) for l in libs) + " |")
        lines.append("|---:|" + "---:|" * len(libs))
        for row in small:
            lines.append(f"| {human(row['size'])} | " +
                         " | ".join(fmt(row["time"].get(l)) for l in libs) + " |")
        if res["floor"]:
            lines += ["", f"Latency floor: {a.nranks} processes passing a bare shared-memory "
                      f"barrier (perf/peers/barrier_floor.c: a store, then polls of every peer's "
                      f"line, yielding the core after a few) take "
                      f"**{statistics.median(res['floor']):.2f} us** a round (rounds: "
                      f"{min(res['floor']):.2f}-{max(res['floor']):.2f}); a small all-reduce "
                      f"needs at least that exchange."]
    ratios = [row["ratio"] for row in table if row["ratio"] is not None]
    big = [row["ratio"] for row in table if row["ratio"] is not None and row["size"] >= 1 << 20]
    lines.append("")
    if ratios:
        lines.append(f"Chorus / best peer, median over sizes: {statistics.median(ratios):.2f} "
                     f"(all sizes), {fmt(statistics.median(big) if big else None)} "
                     f"(1 MiB and up).")
    if res["bound"]:
        pp = statistics.median([b["per_process_rw_GBps"] for b in res["bound"]])
        tot = statistics.median([b["total_rw_GBps"] for b in res["bound"]])
        lo = min(b["bound_busbw_GBps"] for b in res["bound"])
        hi = max(b["bound_busbw_GBps"] for b in res["bound"])
        lines.append(f"Memory bound: {a.nranks} processes each copying {human(a.bound_size)} "
                     f"with memcpy at once move {tot:.2f} GB/s read+written in all, {pp:.2f} GB/s "
                     f"per process; an all-reduce that only read its input and wrote its output "
                     f"once would reach about half of that: **{bound:.2f} GB/s** busbw "
                     f"(rounds: {lo:.2f}-{hi:.2f}).")
    if transfer:
        lines.append(f"Transfer references (perf/peers/exchange_bound.c, {a.nranks} processes "
                     f"at once, each taking the next one's block of the size from shared memory "
                     f"into its own; GB/s received per process, median of the rounds' medians; "
                     f"sizes from 4 KiB): **pull**, the block written beforehand and only the "
                     f"copy timed, a ceiling for what any collective receives per second at that "
                     f"size (the busbw definitions count the bytes each rank must receive); "
                     f"**staged**, each process copying its own data into its block, a barrier, "
                     f"then the copy out, timed together: one bulk step through shared memory.")
    if a.algos:
        lines += ["", "### Chorus algorithms (CHORUS_ALGO), busbw (GB/s)", ""]
        algo_libs = ["chorus"] + [f"chorus:{x}" for x in a.algos]
        algo_libs = [l for l in algo_libs if l in res["runs"]]
        algo_table = summarize(a, res, "chorus", peers=algo_libs[1:])
        lines.append("| size | " + " | ".join(label(l) for l in algo_libs) +
                     " | fastest forced |")
        lines.append("|---:|" + "---:|" * (len(algo_libs) + 1))
        for row in algo_table:
            lines.append(f"| {human(row['size'])} | " +
                         " | ".join(cell(row, l, a.spread) for l in algo_libs) +
                         f" | {label(row['best']) if row['best'] else 'n/a'} |")
    lines += ["", "Libraries:"]
    for lib in libs + [f"chorus:{x}" for x in a.algos]:
        v = res["unsupported"].get(lib) or res["versions"].get(lib) or "did not run"
        lines.append(f"- {label(lib)}: {v}; {res['seconds'].get(lib, 0):.1f} s of runs")
    lines.append(f"- machine: {os.cpu_count()} CPUs, {cpu_model()}; load average before "
                 f"{res['load_before']}, after {res['load_after']}")
    if res["failures"]:
        lines += ["", "Failures:"] + [f"- {f}" for f in res["failures"]]
    lines.append(f"\nLogs: {res['log_dir']}")
    return "\n".join(lines) + "\n", bound


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def plot(a, res, libs, bound, path, title_extra=""):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("compare.py: matplotlib is missing (apt-get install python3-matplotlib; run with "
              "/usr/bin/python3): no plot", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for lib in libs:
        runs = res["runs"].get(lib, {})
        xs = [s for s in size_list(a) if runs.get(s)]
        if not xs:
            continue
        med = [median_of(runs[s], "busbw") for s in xs]
        lo = [m - min(x["busbw"] for x in runs[s]) for m, s in zip(med, xs)]
        hi = [max(x["busbw"] for x in runs[s]) - m for m, s in zip(med, xs)]
        ax.errorbar(xs, med, yerr=[lo, hi], marker="o", markersize=4, capsize=3,
                    linewidth=1.5, label=label(lib))
    if bound is not None:
        ax.axhline(bound, color="black", linestyle="--", linewidth=1,
                   label=f"memcpy bound ({bound:.2f} GB/s)")
    xs = [sz for sz in exchange_sizes(a) if exchange_median(res, sz, "pull") is not None]
    if xs:
        ax.plot(xs, [exchange_median(res, sz, "pull") for sz in xs], color="gray", linestyle=":",
                linewidth=1.5, label="pull ceiling (exchange_bound)")
    ax.set_xscale("log", base=2)
    if a.logy:
        ax.set_yscale("log")
    ticks = size_list(a)
    ax.set_xticks(ticks)
    ax.set_xticklabels([human(t).replace(" ", "") for t in ticks], rotation=45, ha="right")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    mode = "in-place" if a.inplace else "out-of-place"
    ax.set_title(f"{a.coll}, {a.nranks} ranks, float32, {mode}{title_extra}: median of "
                 f"{a.rounds} rounds (bars: min-max)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv):
    a = parse_args(argv)
    libs = list(a.libs)
    if a.algos and "chorus" not in libs:
        libs.insert(0, "chorus")
    run_libs = libs + [f"chorus:{x}" for x in a.algos]
    runner = Runner(a)
    if any(l.startswith("chorus") for l in run_libs) and not a.dry_run:
        for path in (runner.chorusrun, runner.perf):
            if not os.access(path, os.X_OK):
                sys.exit(f"compare.py: {path} is missing: build Chorus first (meson setup "
                         f"{a.build} && meson compile -C {a.build}), or pass --build DIR")
    unavailable = build_peers(a, libs)
    if "gloo" in libs and subprocess.run(
            [a.python, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
            capture_output=True).returncode != 0:
        unavailable["gloo"] = f"{a.python} cannot import torch with gloo (apt-get install " \
                              "python3-torch)"
    if "bound" in unavailable:
        print(f"compare.py: memcpy_bound: {unavailable.pop('bound')}", file=sys.stderr)
        a.no_bound = True
    for lib, why in unavailable.items():
        print(f"compare.py: skipping {label(lib)}: {why}", file=sys.stderr)
    run_libs = [l for l in run_libs if l not in unavailable]
    libs = [l for l in libs if l not in unavailable]
    plan = bands(a)
    print(f"# plan: {len(size_list(a))} sizes in {len(plan)} runs per library and round, "
          f"{a.rounds} rounds, libraries: {', '.join(label(l) for l in run_libs)}",
          file=sys.stderr)
    t0 = time.monotonic()
    if a.ns and not a.dry_run:
        try:
            a.ns.setup()
        except RuntimeError as e:
            sys.exit(f"compare.py: {e}")
    try:
        res = measure(a, run_libs)
    finally:
        if a.ns:
            a.ns.teardown()
    if a.dry_run:
        return 0
    table = summarize(a, res)
    text, bound = report(a, res, libs, table)
    text += f"Total wall time: {time.monotonic() - t0:.0f} s.\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    if a.plot:
        plot(a, res, libs, bound, a.plot)
    if a.algo_plot and a.algos:
        plot(a, res, ["chorus"] + [f"chorus:{x}" for x in a.algos], bound, a.algo_plot,
             " (Chorus algorithms)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "table": table, **{k: v for k, v in res.items()}}, f,
                      indent=1, default=str)
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
