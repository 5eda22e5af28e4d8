"""Synchronous data parallelism: every rank holds the whole model, trains on its own shard of
each global batch, and the ranks average their gradients with one all-reduce per step, so that
all of them take the same optimizer step and keep identical parameters.

    chorusrun -n 4 python3 examples/data_parallel.py [--small] [--steps N] [--batch B] ...

The model is a two-layer perceptron (tanh hidden layer, linear output) fitted by plain SGD to a
synthetic regression problem, written with numpy alone (forward and backward by hand) in
float64. The parameters and the gradients live in one flat buffer each, so that a single
all-reduce carries every gradient of a step (what frameworks call a gradient bucket).

Self-check: rank 0 also trains the same model in one process on the full batches, from the same
seed, and compares its loss curve and final parameters with the distributed run; every rank
checks that all ranks hold bit-identical parameters. All ranks exit non-zero when a check fails.
"""

import argparse
import sys
import time

import numpy as np

import chorus


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="a quick run (tests)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (200; small: 40)")
    p.add_argument("--batch", type=int, default=None, help="global batch size (256; small: 48)")
    p.add_argument("--features", type=int, default=None, help="input features (32; small: 8)")
    p.add_argument("--hidden", type=int, default=None, help="hidden units (64; small: 16)")
    p.add_argument("--samples", type=int, default=None, help="data set size (4096; small: 480)")
    p.add_argument("--lr", type=float, default=0.2, help="learning rate")
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args()
    defaults = dict(steps=(200, 40), batch=(256, 48), features=(32, 8), hidden=(64, 16),
                    samples=(4096, 480))
    for name, (full, small) in defaults.items():
        if getattr(a, name) is None:
            setattr(a, name, small if a.small else full)
    return a


class MLP:
    """x -> tanh(x W1 + b1) W2 + b2, its parameters views into one flat float64 vector."""

    def __init__(self, features, hidden, seed):
        shapes = [("W1", (features, hidden)), ("b1", (hidden,)), ("W2", (hidden, 1)), ("b2", (1,))]
        self.size = sum(int(np.prod(s)) for _, s in shapes)
        self.flat = np.zeros(self.size)
        self.grad = np.zeros(self.size)
        self.p, self.g = {}, {}
        at = 0
        for name, shape in shapes:
            n = int(np.prod(shape))
            self.p[name] = self.flat[at:at + n].reshape(shape)
            self.g[name] = self.grad[at:at + n].reshape(shape)
            at += n
        rng = np.random.default_rng(seed)
        self.p["W1"][...] = rng.normal(0.0, 1.0 / np.sqrt(features), (features, hidden))
        self.p["W2"][...] = rng.normal(0.0, 1.0 / np.sqrt(hidden), (hidden, 1))

    def loss_and_grad_sum(self, x, t):
        """Sum over the rows of x of the per-sample loss 0.5 (y - t)^2, with the gradient of that
        sum written into self.grad (sums, not means: shards of any size add up exactly)."""
        p, g = self.p, self.g
        h = np.tanh(x @ p["W1"] + p["b1"])
        y = h @ p["W2"] + p["b2"]
        err = y - t
        dh = (err @ p["W2"].T) * (1.0 - h * h)
        g["W2"][...] = h.T @ err
        g["b2"][...] = err.sum(axis=0)
        g["W1"][...] = x.T @ dh
        g["b1"][...] = dh.sum(axis=0)
        return 0.5 * float(np.sum(err * err))


def make_data(args):
    """The whole data set, identical on every rank (same seed): a smooth nonlinear target."""
    rng = np.random.default_rng(args.seed + 1)
    x = rng.normal(size=(args.samples, args.features))
    w = rng.normal(size=(args.features, 1)) / np.sqrt(args.features)
    t = np.sin(x @ w) + 0.05 * rng.normal(size=(args.samples, 1))
    return x, t


def batches(args):
    """The indices of each step's global batch: an epoch-wise shuffle, the same on every rank."""
    rng = np.random.default_rng(args.seed + 2)
    order = rng.permutation(args.samples)
    at = 0
    for _ in range(args.steps):
        if at + args.batch > args.samples:
            order, at = rng.permutation(args.samples), 0
        yield order[at:at + args.batch]
        at += args.batch


def train_distributed(comm, args, x, t):
    model = MLP(args.features, args.hidden, args.seed)
    losses = []
    loss_buf = np.zeros(1)
    for idx in batches(args):
        # This rank's shard of the global batch (shards differ in size by at most one row).
        mine = np.array_split(idx, comm.size)[comm.rank]
        loss_buf[0] = model.loss_and_grad_sum(x[mine], t[mine])
        # Sum the gradients (and the loss) of all shards, then divide by the global batch: the
        # gradient of the mean loss over the whole batch, on every rank.
        comm.all_reduce(model.grad, model.grad, op="sum")
        comm.all_reduce(loss_buf, loss_buf, op="sum")
        model.flat -= (args.lr / len(idx)) * model.grad
        losses.append(loss_buf[0] / len(idx))
    return model, np.array(losses)


def train_reference(args, x, t):
    model = MLP(args.features, args.hidden, args.seed)
    losses = []
    for idx in batches(args):
        loss = model.loss_and_grad_sum(x[idx], t[idx])
        model.flat -= (args.lr / len(idx)) * model.grad
        losses.append(loss / len(idx))
    return model, np.array(losses)


def main():
    args = parse_args()
    with chorus.Communicator.from_env() as comm:
        if args.batch < comm.size:
            raise SystemExit("--batch %d must be at least the %d ranks" % (args.batch, comm.size))
        x, t = make_data(args)
        say = print if comm.rank == 0 else (lambda *a, **k: None)
        say("data parallel: %d ranks, MLP %d-%d-1 (%d parameters), global batch %d "
            "(%s rows per rank), %d steps"
            % (comm.size, args.features, args.hidden, MLP(args.features, args.hidden, 0).size,
               args.batch, "/".join(str(len(s)) for s in np.array_split(np.arange(args.batch),
                                                                       comm.size)), args.steps))
        start = time.perf_counter()
        model, losses = train_distributed(comm, args, x, t)
        took = time.perf_counter() - start
        every = max(1, args.steps // 8)
        for i in sorted(set(range(0, args.steps, every)) | {args.steps - 1}):
            say("  step %4d  loss %.6f" % (i, losses[i]))
        say("trained in %.2f s" % took)

        # Identical parameters everywhere: the element-wise max and min over all ranks agree.
        hi = comm.all_reduce(model.flat, op="max")
        lo = comm.all_reduce(model.flat, op="min")
        failures = []
        if not np.array_equal(hi, lo):
            failures.append("rank %d: the ranks' parameters differ (by up to %.3g)"
                            % (comm.rank, float(np.max(hi - lo))))
        if comm.rank == 0:
            ref, ref_losses = train_reference(args, x, t)
            loss_err = float(np.max(np.abs(losses - ref_losses) / np.abs(ref_losses)))
            param_err = float(np.max(np.abs(model.flat - ref.flat)) / np.max(np.abs(ref.flat)))
            say("single-process reference: final loss %.6f; max relative difference: "
                "losses %.2e, parameters %.2e" % (ref_losses[-1], loss_err, param_err))
            if not loss_err <= 1e-9:
                failures.append("the loss curve differs from the single-process run (%.3g)"
                                % loss_err)
            if not param_err <= 1e-9:
                failures.append("the final parameters differ from the single-process run (%.3g)"
                                % param_err)
            # Training did something: the loss over the whole data set fell by half at least.
            before = MLP(args.features, args.hidden, args.seed).loss_and_grad_sum(x, t) / len(x)
            after = model.loss_and_grad_sum(x, t) / len(x)
            say("loss over all %d samples: %.6f before, %.6f after" % (len(x), before, after))
            if not after < 0.5 * before:
                failures.append("the loss did not fall (%.4f -> %.4f)" % (before, after))
        for f in failures:
            print("FAILED: " + f, file=sys.stderr)
        verdict = np.array([len(failures)], dtype=np.int32)
        comm.all_reduce(verdict, verdict, op="max")
        if verdict[0] != 0:
            return 1
        say("OK: %d rank%s trained the same parameters as one process"
            % (comm.size, "s" if comm.size > 1 else ""))
        return 0


if __name__ == "__main__":
    sys.exit(main())
