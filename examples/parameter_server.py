"""A parameter server with asynchronous workers and bounded staleness.

    chorusrun -n 4 python3 examples/parameter_server.py [--small] [--servers S] [--max-staleness K]

Ranks 0..S-1 are servers, each holding one shard of the parameters of a linear regression model;
the other ranks are workers. A worker loops on its own: it pulls the current parameters from
every server, computes a gradient on a minibatch of its own data, and pushes each server its part
of the gradient. Workers never wait for each other. Worker i is made i+1 times slower than worker
0 (a sleep of (i+1) x --delay ms per step stands in for a slower machine or a larger share of
work), so the fast workers take more steps than the slow ones.

How a server serves several workers at once with blocking send/recv: a receive names its peer
and blocks until that peer sends, so one loop over the workers would wait on the slowest one.
Instead each server shares a two-rank communicator with every worker (server = rank 0, worker
= rank 1), split off the world communicator (comm.split: every rank takes part in each split,
the pair passing one color and the rest none), and serves each from its own thread.
Calls on different communicators may run at the same time from different threads (ctypes
releases the GIL during each call), so a thread blocked on a slow worker holds up no one else.
The threads share the server's shard, version counter and statistics under one lock.

The protocol on each pair communicator is request/response, always started by the worker:
  PULL           -> [version, stop] and the shard's parameters
  PUSH version   (then the gradient) -> [accepted, staleness, stop]
  DONE           (the worker leaves; the serving thread ends)
Each applied gradient increments the shard's version. A gradient's staleness is the shard's
version when it arrives minus the version the worker pulled, i.e. how many updates from other
workers landed while it was computed. One staler than --max-staleness is rejected (not applied);
the worker drops it and pulls afresh. Once a server has applied --updates gradients it answers
stop, and each worker finishes at its next request.

Self-check: the loss over the whole data set falls to under 5% of its initial value, and no
applied gradient was staler than the bound. Rank 0 prints per-worker steps and staleness.
"""

import argparse
import sys
import threading
import time

import numpy as np

import chorus

PULL, PUSH, DONE = 0, 1, 2


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="a quick run (tests)")
    p.add_argument("--servers", type=int, default=1, help="server ranks (1)")
    p.add_argument("--max-staleness", type=int, default=3,
                   help="reject gradients computed on parameters more than K updates old (3)")
    p.add_argument("--updates", type=int, default=None,
                   help="gradients each server applies before stopping (600; small: 120)")
    p.add_argument("--features", type=int, default=None, help="model size (256; small: 32)")
    p.add_argument("--batch", type=int, default=32, help="minibatch per worker step")
    p.add_argument("--samples", type=int, default=None, help="data set size (8192; small: 1024)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--delay", type=float, default=None,
                   help="ms of simulated work per step, times (i+1) for worker i (4; small: 2)")
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    defaults = dict(updates=(600, 120), features=(256, 32), samples=(8192, 1024), delay=(4.0, 2.0))
    for name, (full, small) in defaults.items():
        if getattr(a, name) is None:
            setattr(a, name, small if a.small else full)
    return a


def make_data(args):
    """y = x . w_true + noise; the same on every rank."""
    rng = np.random.default_rng(args.seed)
    x = rng.normal(size=(args.samples, args.features))
    w_true = rng.normal(size=args.features) / np.sqrt(args.features)
    y = x @ w_true + 0.01 * rng.normal(size=args.samples)
    return x, y


def loss(w, x, y):
    r = x @ w - y
    return 0.5 * float(np.mean(r * r))


class Shard:
    """One server's slice of the parameters, shared by its serving threads."""

    def __init__(self, size, args):
        self.params = np.zeros(size)
        self.version = 0
        self.applied = 0
        self.rejected = 0
        self.max_staleness = 0
        self.staleness_sum = 0
        self.args = args
        self.lock = threading.Lock()

    def stop(self):
        return self.applied >= self.args.updates


def serve(shard, pair, errors):
    """Serves one worker over its own communicator until it says DONE."""
    try:
        with pair:
            header = np.zeros(2, dtype=np.int64)
            grad = np.zeros_like(shard.params)
            while True:
                pair.recv(header, 1)
                if header[0] == PULL:
                    with shard.lock:
                        snapshot = shard.params.copy()
                        reply = np.array([shard.version, shard.stop()], dtype=np.int64)
                    pair.send(reply, 1)
                    pair.send(snapshot, 1)
                elif header[0] == PUSH:
                    pair.recv(grad, 1)
                    with shard.lock:
                        staleness = shard.version - int(header[1])
                        accepted = staleness <= shard.args.max_staleness
                        if accepted:
                            shard.params -= shard.args.lr * grad
                            shard.version += 1
                            shard.applied += 1
                            shard.max_staleness = max(shard.max_staleness, staleness)
                            shard.staleness_sum += staleness
                        else:
                            shard.rejected += 1
                        reply = np.array([accepted, staleness, shard.stop()], dtype=np.int64)
                    pair.send(reply, 1)
                elif header[0] == DONE:
                    return
                else:
                    raise RuntimeError("unknown request %d" % header[0])
    except Exception as e:  # noqa: BLE001 - reported by the main thread
        errors.append(e)


def run_server(comm, args, bounds, pairs):
    """Returns this server's statistics once every worker has left."""
    shard = Shard(bounds[comm.rank + 1] - bounds[comm.rank], args)
    errors = []
    threads = [threading.Thread(target=serve, args=(shard, pair, errors)) for pair in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return shard


def run_worker(comm, args, bounds, pairs, x, y):
    """Pull, compute, push until a server says stop; returns this worker's statistics."""
    servers = args.servers
    index = comm.rank - servers
    mine = np.arange(index, args.samples, comm.size - servers)  # this worker's data
    rng = np.random.default_rng(args.seed + 100 + index)
    w = np.zeros(args.features)
    versions = np.zeros(servers, dtype=np.int64)
    header = np.zeros(2, dtype=np.int64)
    reply = np.zeros(3, dtype=np.int64)
    stats = dict(steps=0, accepted=0, rejected=0, staleness_sum=0, staleness_max=0)
    stop = False
    while not stop:
        for s, pair in enumerate(pairs):
            header[:] = (PULL, 0)
            pair.send(header, 0)
            pair.recv(reply[:2], 0)
            pair.recv(w[bounds[s]:bounds[s + 1]], 0)
            versions[s] = reply[0]
            stop = stop or bool(reply[1])
        if stop:
            break
        batch = rng.choice(mine, size=min(args.batch, len(mine)), replace=False)
        xb, yb = x[batch], y[batch]
        grad = xb.T @ (xb @ w - yb) / len(batch)
        time.sleep(args.delay * (index + 1) / 1000.0)
        stats["steps"] += 1
        for s, pair in enumerate(pairs):
            header[:] = (PUSH, versions[s])
            pair.send(header, 0)
            pair.send(np.ascontiguousarray(grad[bounds[s]:bounds[s + 1]]), 0)
            pair.recv(reply, 0)
            if reply[0]:
                stats["accepted"] += 1
                stats["staleness_sum"] += int(reply[1])
                stats["staleness_max"] = max(stats["staleness_max"], int(reply[1]))
            else:
                stats["rejected"] += 1
            stop = stop or bool(reply[2])
    header[:] = (DONE, 0)
    for pair in pairs:
        pair.send(header, 0)
    for pair in pairs:
        pair.destroy()
    return stats


def main():
    args = parse_args()
    with chorus.Communicator.from_env() as comm:
        S = args.servers
        W = comm.size - S
        if S < 1 or W < 1:
            raise SystemExit("need at least one server and one worker: --servers %d of %d ranks"
                             % (S, comm.size))
        if args.features < S:
            raise SystemExit("--features %d cannot be split over %d servers" % (args.features, S))
        say = print if comm.rank == 0 else (lambda *a, **k: None)
        bounds = [int(b) for b in np.linspace(0, args.features, S + 1).round()]
        x, y = make_data(args)
        say("parameter server: %d server%s, %d workers, %d parameters, max staleness %d, "
            "%d updates per server" % (S, "s" if S > 1 else "", W, args.features,
                                       args.max_staleness, args.updates))

        # A communicator for each (server, worker) pair, the server its rank 0.
        pairs = {}
        for srv in range(S):
            for i in range(W):
                member = comm.rank in (srv, S + i)
                pair = comm.split(0 if member else None, key=0 if comm.rank == srv else 1)
                if pair is not None:
                    pairs[srv, i] = pair
        start = time.perf_counter()
        if comm.rank < S:
            shard = run_server(comm, args, bounds, [pairs[comm.rank, i] for i in range(W)])
            mine = np.array([shard.applied, shard.rejected, shard.staleness_sum,
                             shard.max_staleness, 0], float)
        else:
            st = run_worker(comm, args, bounds, [pairs[s, comm.rank - S] for s in range(S)], x, y)
            mine = np.array([st["steps"], st["accepted"], st["rejected"], st["staleness_sum"],
                             st["staleness_max"]], float)
        took = time.perf_counter() - start

        # The final model: each server contributes its shard, the sum is the whole vector.
        w = np.zeros(args.features)
        if comm.rank < S:
            w[bounds[comm.rank]:bounds[comm.rank + 1]] = shard.params
        comm.all_reduce(w, w, op="sum")
        stats = comm.all_gather(mine)

        failures = []
        if comm.rank == 0:
            say("trained in %.2f s" % took)
            say("  (a push is one step's gradient for one server; staleness of applied ones)")
            say("  worker  rank  slowdown  steps  pushes applied  rejected  staleness mean  max")
            for i in range(W):
                steps, acc, rej, ssum, smax = stats[S + i]
                say("  %6d  %4d  %7dx  %5d  %14d  %8d  %14.2f  %3d"
                    % (i, S + i, i + 1, steps, acc, rej, ssum / acc if acc else 0.0, smax))
            for s in range(S):
                applied, rejected, ssum, smax = stats[s][:4]
                say("  server %d: %d gradients applied, %d rejected as too stale; staleness mean "
                    "%.2f, max %d" % (s, applied, rejected, ssum / max(applied, 1), smax))
            worst = int(max(stats[s][3] for s in range(S)))
            if worst > args.max_staleness:
                failures.append("a gradient of staleness %d was applied (bound %d)"
                                % (worst, args.max_staleness))
            before, after = loss(np.zeros(args.features), x, y), loss(w, x, y)
            say("loss over all %d samples: %.6f before, %.6f after" % (args.samples, before, after))
            if not after < 0.05 * before:
                failures.append("the loss did not fall enough (%.4f -> %.4f)" % (before, after))
        for f in failures:
            print("FAILED: " + f, file=sys.stderr)
        verdict = np.array([len(failures)], dtype=np.int32)
        comm.all_reduce(verdict, verdict, op="max")
        if verdict[0] != 0:
            return 1
        say("OK: the loss fell and no applied gradient was staler than %d" % args.max_staleness)
        return 0


if __name__ == "__main__":
    sys.exit(main())
