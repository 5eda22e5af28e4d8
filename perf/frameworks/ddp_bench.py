#!/usr/bin/env python3
"""DistributedDataParallel on "chorus" against "gloo", side by side.

Each round starts NRANKS processes per backend, the backends in turn (interleaved rounds, so
that a change in the machine's state hits both alike); each run times DDP training steps
(forward, backward with the gradient all-reduces DDP overlaps with it, optimizer step) and a
plain all-reduce of the whole gradient. The report is the median over rounds of each run's
median, and chorus's speed-up (gloo time / chorus time) per round and its median.

    PYTHONPATH=build/python /usr/bin/python3 perf/frameworks/ddp_bench.py --nranks 2 --rounds 5
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(args):
    import torch
    import torch.distributed as dist

    import chorus.torch  # noqa: F401 - registers "chorus"

    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    torch.manual_seed(0)
    if args.model == "mlp":
        layers = []
        for i in range(args.layers):
            layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers)
        x = torch.randn(args.batch, args.width)
    else:
        # An embedding table with dense gradients (as in recommendation and language models)
        # feeding Linear layers: little arithmetic for many gradient bytes.
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.table = torch.nn.Embedding(args.vocab, args.width)
                self.head = torch.nn.Sequential(*[
                    m for _ in range(args.layers)
                    for m in (torch.nn.Linear(args.width, args.width), torch.nn.ReLU())])

            def forward(self, ids):
                return self.head(self.table(ids).mean(dim=1))

        model = Net()
        x = torch.randint(0, args.vocab, (args.batch, 16))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    steps = []
    for i in range(args.warmup + args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        ddp(x).square().mean().backward()
        opt.step()
        if i >= args.warmup:
            steps.append(time.perf_counter() - t0)
    flat = torch.zeros(grad_bytes // 4)
    reduces = []
    for i in range(args.warmup + args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(flat)
        if i >= args.warmup:
            reduces.append(time.perf_counter() - t0)
    if rank == 0:
        print("RESULT %s %d %.6f %.6f" % (args.backend, grad_bytes, statistics.median(steps),
                                           statistics.median(reduces)), flush=True)
    dist.destroy_process_group()


def run(backend, args):
    port = free_port()
    procs = []
    for r in range(args.nranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.nranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--backend", backend,
               "--model", args.model, "--vocab", str(args.vocab),
               "--width", str(args.width), "--layers", str(args.layers), "--batch",
               str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    result = None
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit("%s run failed (exit %d)" % (backend, p.returncode))
        for line in out.splitlines():
            if line.startswith("RESULT"):
                _, _, grad_bytes, step, reduce = line.split()
                result = (int(grad_bytes), float(step), float(reduce))
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", choices=["mlp", "embedding"], default="mlp",
                    help="mlp: LAYERS x Linear(WIDTH, WIDTH); embedding: an Embedding(VOCAB, "
                    "WIDTH) table with dense gradients, 16 ids a sample, before the LAYERS")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4, help="Linear(width, width) layers")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="chorus", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    rows = {"gloo": [], "chorus": []}
    for _ in range(args.rounds):
        for backend in ("gloo", "chorus"):
            rows[backend].append(run(backend, args))
    grad_mib = rows["chorus"][0][0] / 2**20
    model = "%d x Linear(%d, %d)" % (args.layers, args.width, args.width)
    if args.model == "embedding":
        model = "Embedding(%d, %d) + %s" % (args.vocab, args.width, model)
    print("DDP, %d ranks, %s, batch %d, gradients %.1f MiB; %d rounds, median of %d steps "
          "each" % (args.nranks, model, args.batch, grad_mib, args.rounds, args.steps))
    print("%-8s %14s %20s" % ("backend", "step (ms)", "all-reduce (ms)"))
    for b in ("gloo", "chorus"):
        print("%-8s %14.2f %20.2f" % (b, 1e3 * statistics.median(r[1] for r in rows[b]),
                                      1e3 * statistics.median(r[2] for r in rows[b])))
    step_ratio = [g[1] / c[1] for g, c in zip(rows["gloo"], rows["chorus"])]
    red_ratio = [g[2] / c[2] for g, c in zip(rows["gloo"], rows["chorus"])]
    print("chorus speed-up, step:       median %.2fx (rounds: %s)" % (
        statistics.median(step_ratio), " ".join("%.2f" % x for x in step_ratio)))
    print("chorus speed-up, all-reduce: median %.2fx (rounds: %s)" % (
        statistics.median(red_ratio), " ".join("%.2f" % x for x in red_ratio)))


if __name__ == "__main__":
    main()
