#!/usr/bin/python3
"""gloo_bench: the Gloo side of the Chorus comparison.

Times torch.distributed collectives on the gloo backend (float32, sum) with the command line,
size meaning, output columns and bus bandwidth of Chorus's <coll>_perf tools, so that
compare.py parses both alike. Runs with the Python that has torch (Debian's python3-torch is
installed for /usr/bin/python3 only).

Launch: `gloo_bench.py all_reduce --nranks 2 ...` starts the ranks itself on this host; with
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (torchrun or by hand) it runs as that rank.
"""

import argparse
import multiprocessing
import os
import socket
import sys
import time

COLLS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
EXIT_UNSUPPORTED = 3


def parse_size(text):
    units = {"k": 1, "m": 2, "g": 3, "t": 4}
    s = text.strip()
    scale = 1
    if s and s[-1].lower() in units:
        scale = 1 << (10 * units[s[-1].lower()])
        s = s[:-1]
    try:
        value = float(s) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size '{text}': expected e.g. 8, 64K, 1M, 2G")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"invalid size '{text}'")
    return int(value)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("coll", choices=COLLS)
    p.add_argument("-b", "--minbytes", type=parse_size, default=32 << 20)
    p.add_argument("-e", "--maxbytes", type=parse_size, default=32 << 20)
    p.add_argument("-i", "--stepbytes", type=parse_size, default=1 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=1)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-c", "--check", type=int, default=1)
    p.add_argument("-a", "--average", type=int, default=1, choices=range(4),
                   help="time across ranks: 0 rank 0, 1 avg, 2 min, 3 max (default 1)")
    p.add_argument("-r", "--root", type=int, default=0)
    p.add_argument("-I", "--inplace", type=int, default=0, choices=(0, 1),
                   help="also time the in-place form (default 0)")
    p.add_argument("-d", "--datatype", default="float", choices=("float", "float32"))
    p.add_argument("-o", "--op", default="sum", choices=("sum",))
    p.add_argument("--nranks", type=int, default=0,
                   help="start this many local ranks (default: run as the rank in RANK)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    a = p.parse_args(argv)
    if a.minbytes > a.maxbytes:
        p.error("minbytes is larger than maxbytes")
    if a.stepfactor <= 1 and a.stepbytes == 0 and a.minbytes < a.maxbytes:
        p.error("stepbytes (-i) must be positive when no stepfactor (-f) above 1 is given")
    if a.iters < 1 or a.warmup_iters < 0 or a.check < 0:
        p.error("-n must be at least 1, -w and -c at least 0")
    return a


def sizes(a):
    b = a.minbytes
    while b <= a.maxbytes:
        yield b
        nxt = b * a.stepfactor if a.stepfactor > 1 else b + a.stepbytes
        if nxt <= b:
            return
        b = nxt


class Counts:
    """Element counts of one call for a test size, as Chorus's perf tools define them."""

    def __init__(self, coll, count, nranks):
        self.send = self.recv = self.param = count
        self.send_inplace_offset = self.recv_inplace_offset = 0
        if coll == "all_gather":  # the size is the gathered output
            self.send = self.param = count // nranks
            self.recv = self.send * nranks
            self.send_inplace_offset = self.send
        elif coll == "reduce_scatter":  # the size is each rank's input
            self.recv = self.param = count // nranks
            self.send = self.recv * nranks
            self.recv_inplace_offset = self.recv

    def inplace_span(self, rank):
        return max(self.send_inplace_offset * rank + self.send,
                   self.recv_inplace_offset * rank + self.recv)


def bus_factor(coll, n):
    if coll == "all_reduce":
        return 2.0 * (n - 1) / n
    if coll in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


def fit(v, width):
    for prec in (2, 1, 0):
        s = f"{v:{width}.{prec}f}"
        if len(s) <= width:
            return s
    return f"{v:{width}.{1 if width >= 7 else 0}e}"


class Bench:
    def __init__(self, a, rank, nranks):
        import torch
        import torch.distributed as dist
        self.torch, self.dist = torch, dist
        self.a, self.rank, self.n = a, rank, nranks
        self.errors, self.bw = 0, []
        self.check_runs = 0
        top = Counts(a.coll, a.maxbytes // 4, nranks)
        send_elems = max(top.send, a.maxbytes // 4)
        recv_elems = max(top.recv, top.inplace_span(nranks - 1), a.maxbytes // 4)
        page = 1024  # elements: 4 KiB
        self.send = torch.zeros(max(-(-send_elems // page) * page, page), dtype=torch.float32)
        self.recv = torch.zeros(max(-(-recv_elems // page) * page, page), dtype=torch.float32)

    def views(self, c, inplace, it):
        """The buffers of iteration `it`: calls walk through the allocation as Chorus's do."""
        need_send = 0 if inplace else c.send
        need_recv = c.inplace_span(self.rank) if inplace else c.recv
        span = max(need_send, need_recv)
        room = self.recv.numel() if inplace else min(self.send.numel(), self.recv.numel())
        steps = max(room // span, 1) if span else 1
        shift = span * (it % steps)
        recv = self.recv[shift:shift + need_recv]
        if inplace:
            send = recv[c.send_inplace_offset * self.rank:][:c.send]
            out = recv[c.recv_inplace_offset * self.rank:][:c.recv]
        else:
            send = self.send[shift:shift + c.send]
            out = recv
        return send, out

    def make_call(self, c, inplace, it):
        """A closure doing one collective call, with its views prepared outside the timing."""
        dist, coll = self.dist, self.a.coll
        send, out = self.views(c, inplace, it)
        if coll == "all_reduce":
            if inplace:
                return lambda: dist.all_reduce(out)
            # allreduce is in place in torch: out of place is a copy plus the in-place call
            return lambda: (out.copy_(send), dist.all_reduce(out))
        if coll == "all_gather":
            outputs = list(out.split(c.send)) if c.send else [out[:0]] * self.n
            return lambda: dist.all_gather(outputs, send)
        if coll == "broadcast":
            # one buffer: out of place, the root sends from its input, the others receive
            buf = send if (self.rank == self.a.root and not inplace) else out
            return lambda: dist.broadcast(buf, self.a.root)
        raise AssertionError(coll)

    def inputs(self, rank, first, count, seed):
        idx = self.torch.arange(first, first + count, dtype=self.torch.int64)
        return ((idx * 2654435761 + rank * 97 + seed * 13) % 61 - 30).to(self.torch.float32)

    def init_data(self, c, inplace, seed):
        send, out = self.views(c, inplace, 0)
        if inplace:
            self.recv[:c.inplace_span(self.rank)].fill_(float("nan"))
        else:
            out.fill_(float("nan"))
        if self.a.coll == "broadcast" and self.rank != self.a.root:
            return
        send.copy_(self.inputs(self.rank, 0, c.send, seed))

    def count_wrong(self, c, inplace, seed):
        _, out = self.views(c, inplace, 0)
        coll, torch = self.a.coll, self.torch
        if coll == "broadcast" and self.rank == self.a.root and not inplace:
            return 0  # the root's receive buffer is not part of an MPI-style broadcast
        if coll == "all_reduce":
            want = sum(self.inputs(r, 0, c.recv, seed) for r in range(self.n))
        elif coll == "all_gather":
            want = torch.cat([self.inputs(r, 0, c.send, seed) for r in range(self.n)]) \
                if c.send else out[:0]
        else:
            want = self.inputs(self.a.root, 0, c.recv, seed)
        return int((out != want).sum().item())

    def reduce_time(self, sec):
        torch, dist = self.torch, self.dist
        ops = (dist.ReduceOp.SUM, dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX)
        t = torch.tensor([0.0 if self.a.average == 0 and self.rank != 0 else sec],
                         dtype=torch.float64)
        dist.all_reduce(t, ops[self.a.average])
        v = t.item()
        return v / self.n if self.a.average == 1 else v

    def time_one(self, c, inplace):
        a, dist, torch = self.a, self.dist, self.torch
        if a.check:
            self.init_data(c, inplace, 0)
        calls = [self.make_call(c, inplace, it) for it in range(a.iters)]
        calls[0]()
        dist.barrier()
        start = time.perf_counter()
        for call in calls:
            call()
        sec = self.reduce_time((time.perf_counter() - start) / a.iters)
        wrong = 0
        for _ in range(a.check):
            self.check_runs += 1
            self.init_data(c, inplace, self.check_runs)
            calls[0]()
            w = torch.tensor([self.count_wrong(c, inplace, self.check_runs)], dtype=torch.int64)
            dist.all_reduce(w)
            wrong = int(w.item())
            if wrong:
                break
        self.errors += wrong != 0
        nbytes = max(c.send, c.recv) * 4
        algbw = nbytes / 1e9 / sec if sec > 0 else 0.0
        busbw = algbw * bus_factor(a.coll, self.n)
        self.bw.append(busbw)
        return (f"  {fit(sec * 1e6, 7):>7}  {fit(algbw, 6):>6}  {fit(busbw, 6):>6}  "
                f"{str(wrong) if a.check else 'N/A':>6}")

    def run(self):
        a = self.a
        torch, dist = self.torch, self.dist
        if self.rank == 0:
            print(f"# gloo_bench {a.coll}: torch {torch.__version__} gloo backend, "
                  f"{self.n} ranks")
            step = a.stepfactor if a.stepfactor > 1 else a.stepbytes
            print(f"# nRanks {self.n} minBytes {a.minbytes} maxBytes {a.maxbytes} step: {step}"
                  f"({'factor' if a.stepfactor > 1 else 'bytes'}) warmup iters: "
                  f"{a.warmup_iters} iters: {a.iters} validation: {a.check}")
            print(f"#\n# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place"
                  "                       in-place          ")
            cols = ("time", "algbw", "busbw", "#wrong")
            units = ("(us)", "(GB/s)", "(GB/s)", "")
            for first, rest in ((("size", "count", "type", "redop", "root"), cols),
                                (("(B)", "(elements)", "", "", ""), units)):
                print(f"# {first[0]:>10}  {first[1]:>12}  {first[2]:>8}  {first[3]:>6}  "
                      f"{first[4]:>6}" + "".join(f"  {x:>{7 if i == 0 else 6}}"
                                                 for i, x in enumerate(rest * 2)) + " ")
        dist.barrier()
        for nbytes in (a.maxbytes, a.minbytes):
            c = Counts(a.coll, nbytes // 4, self.n)
            for i in range(a.warmup_iters):
                self.make_call(c, False, i)()
        for nbytes in sizes(a):
            c = Counts(a.coll, nbytes // 4, self.n)
            row = (f"{max(c.send, c.recv) * 4:12d}  {c.param:12d}  {'float':>8}  "
                   f"{'sum' if a.coll == 'all_reduce' else 'none':>6}  "
                   f"{a.root if a.coll == 'broadcast' else -1:6d}")
            row += self.time_one(c, False)
            row += self.time_one(c, True) if a.inplace else \
                f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
            if self.rank == 0:
                print(row, flush=True)
        if self.rank == 0:
            avg = sum(self.bw) / len(self.bw) if self.bw else 0.0
            print(f"# {'Out of bounds values':<20} : {self.errors} "
                  f"{'FAILED' if self.errors else 'OK'}")
            print(f"# {'Avg bus bandwidth':<20} : {avg:g} ", flush=True)
        return 1 if self.errors else 0


def run_rank(a, rank, nranks):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(max(a.threads, 1))
    if a.coll == "reduce_scatter":
        if rank == 0:
            print(f"# gloo_bench reduce_scatter: not supported: torch {torch.__version__}'s "
                  "gloo process group has no reduce_scatter", flush=True)
        return EXIT_UNSUPPORTED
    if a.coll == "broadcast" and not 0 <= a.root < nranks:
        print(f"gloo_bench: root {a.root} is out of range for {nranks} ranks", file=sys.stderr)
        return 2
    dist.init_process_group("gloo", rank=rank, world_size=nranks)
    try:
        return Bench(a, rank, nranks).run()
    finally:
        dist.destroy_process_group()


def child(a, rank, nranks, env, status):
    os.environ.update(env)
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(nranks)
    try:
        status[rank] = run_rank(a, rank, nranks)
    except Exception as e:  # report and fail this rank; the parent ends the others
        print(f"gloo_bench: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        status[rank] = 1


def spawn(a):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        env["GLOO_SOCKET_IFNAME"] = "lo"
    ctx = multiprocessing.get_context("spawn")
    status = ctx.Array("i", [-1] * a.nranks)
    procs = [ctx.Process(target=child, args=(a, r, a.nranks, env, status))
             for r in range(a.nranks)]
    for p in procs:
        p.start()
    failed = 0
    pending = list(procs)
    while pending:
        for p in list(pending):
            p.join(0.2)
            if p.exitcode is None:
                continue
            pending.remove(p)
            if p.exitcode != 0 or status[procs.index(p)] not in (0, EXIT_UNSUPPORTED):
                failed = failed or 1
        if failed:  # a rank failed: the others would wait for it forever
            for p in pending:
                p.terminate()
            for p in pending:
                p.join()
            pending = []
    if failed:
        return 1
    return EXIT_UNSUPPORTED if EXIT_UNSUPPORTED in list(status) else 0


def main(argv):
    a = parse_args(argv)
    if a.nranks > 0:
        return spawn(a)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("gloo_bench: give --nranks N, or set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
              file=sys.stderr)
        return 2
    return run_rank(a, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
