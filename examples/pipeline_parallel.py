"""Pipeline (model) parallelism: the layers of a deep perceptron are split across the ranks, one
stage per rank, and each global batch flows through the stages as micro-batches.

    chorusrun -n 4 python3 examples/pipeline_parallel.py [--small] [--schedule gpipe|1f1b]

Stage s holds a contiguous block of layers. In the forward pass it receives the activations of
a micro-batch from stage s-1, runs its layers and sends the result to stage s+1; the last stage
computes the loss. In the backward pass gradients travel the other way: stage s receives the
gradient of its output from stage s+1, back-propagates through its layers (accumulating weight
gradients) and sends the gradient of its input to stage s-1. After all micro-batches of a step
every stage updates its own weights with SGD.

Two schedules:
  gpipe  all forward passes, then all backward passes. Simple, but every stage keeps the
         activations of all micro-batches until the backward phase.
  1f1b   (default) stage s first runs N-1-s forward passes (warm-up), then alternates one
         forward and one backward pass, then drains the remaining backward passes. A stage never
         keeps more than N-s micro-batches' activations.
With blocking send/recv, 1F1B's steady state has neighbours sending to each other at the same
time (stage s sends activations forward while stage s+1 sends a gradient back); each such
send is put in one chorus.group() with the receive it waits for, so both complete together.

Self-check: every rank also trains the whole model in one process on full batches from the same
seed (float64) and compares the parameters of its own stage; rank 0 compares the loss of every
step. Any difference above 1e-9 (relative) fails all ranks.
"""

import argparse
import sys
import time

import numpy as np

import chorus


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="a quick run (tests)")
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="1f1b")
    p.add_argument("--layers", type=int, default=None, help="layers (default: 2 per rank)")
    p.add_argument("--hidden", type=int, default=None, help="hidden width (64; small: 16)")
    p.add_argument("--features", type=int, default=None, help="input features (16; small: 8)")
    p.add_argument("--batch", type=int, default=None, help="global batch (256; small: 40)")
    p.add_argument("--micro-batches", type=int, default=None, help="per step (8; small: 5)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (60; small: 15)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=99)
    a = p.parse_args()
    defaults = dict(hidden=(64, 16), features=(16, 8), batch=(256, 40), micro_batches=(8, 5),
                    steps=(60, 15))
    for name, (full, small) in defaults.items():
        if getattr(a, name) is None:
            setattr(a, name, small if a.small else full)
    return a


class Stage:
    """A block of consecutive layers: linear layers, tanh after each but the model's last one.

    forward/backward work on one micro-batch at a time and keep, per micro-batch, the
    activations the backward pass needs (the "stash")."""

    def __init__(self, layer_ids, widths, seed):
        self.ids = list(layer_ids)
        self.last_layer = len(widths) - 2
        self.W, self.b = [], []
        for i in self.ids:
            rng = np.random.default_rng([seed, i])  # per layer: same on any split
            self.W.append(rng.normal(0.0, 1.0 / np.sqrt(widths[i]), (widths[i], widths[i + 1])))
            self.b.append(np.zeros(widths[i + 1]))
        self.gW = [np.zeros_like(w) for w in self.W]
        self.gb = [np.zeros_like(b) for b in self.b]
        self.stash = {}
        self.peak_stash = 0

    def zero_grad(self):
        for g in self.gW + self.gb:
            g[...] = 0.0

    def forward(self, m, a):
        acts = [a]
        for k, i in enumerate(self.ids):
            a = a @ self.W[k] + self.b[k]
            if i != self.last_layer:
                a = np.tanh(a)
            acts.append(a)
        self.stash[m] = acts
        self.peak_stash = max(self.peak_stash, len(self.stash))
        return a

    def backward(self, m, grad):
        """grad: d loss / d (this stage's output) for micro-batch m; returns d loss / d input."""
        acts = self.stash.pop(m)
        for k in reversed(range(len(self.ids))):
            if self.ids[k] != self.last_layer:
                grad = grad * (1.0 - acts[k + 1] ** 2)
            self.gW[k] += acts[k].T @ grad
            self.gb[k] += grad.sum(axis=0)
            grad = grad @ self.W[k].T
        return grad

    def step(self, lr):
        for p, g in zip(self.W + self.b, self.gW + self.gb):
            p -= lr * g

    def flat(self):
        return np.concatenate([p.ravel() for p in self.W + self.b])


def make_data(args):
    rng = np.random.default_rng(args.seed + 1)
    n = args.batch * 8
    x = rng.normal(size=(n, args.features))
    w = rng.normal(size=(args.features, 1)) / np.sqrt(args.features)
    t = np.sin(x @ w) + 0.05 * rng.normal(size=(n, 1))
    return x, t


def batch_indices(args, n, step):
    return np.random.default_rng([args.seed, 2, step]).choice(n, size=args.batch, replace=False)


class Pipeline:
    """One rank's stage plus the messages between neighbouring stages."""

    def __init__(self, comm, args, widths, x, t):
        self.comm, self.args, self.widths = comm, args, widths
        self.s, self.n = comm.rank, comm.size
        self.first, self.last = self.s == 0, self.s == self.n - 1
        blocks = np.array_split(np.arange(len(widths) - 1), self.n)
        self.stage = Stage(blocks[self.s], widths, args.seed)
        self.in_width = widths[blocks[self.s][0]]
        self.out_width = widths[blocks[self.s][-1] + 1]
        self.x, self.t = x, t

    # ---- messages: recv buffers are sized from the micro-batch, known to every stage ----

    def input_of(self, m):
        if self.first:
            return self.x[self.mb[m]]
        return np.empty((len(self.mb[m]), self.in_width))

    def output_grad_buffer(self, m):
        return np.empty((len(self.mb[m]), self.out_width))

    def recv_forward(self, m):
        a = self.input_of(m)
        if not self.first:
            self.comm.recv(a, self.s - 1)
        return a

    def send_forward(self, y):
        if not self.last:
            self.comm.send(y, self.s + 1)

    def recv_backward(self, m):
        if self.last:
            return None
        g = self.output_grad_buffer(m)
        self.comm.recv(g, self.s + 1)
        return g

    def send_backward(self, dx):
        if not self.first:
            self.comm.send(np.ascontiguousarray(dx), self.s - 1)

    def send_forward_recv_backward(self, y, m):
        if self.last:
            return None
        g = self.output_grad_buffer(m)
        with chorus.group():
            self.comm.send(y, self.s + 1)
            self.comm.recv(g, self.s + 1)
        return g

    def send_backward_recv_forward(self, dx, m):
        a = self.input_of(m)
        if self.first:
            return a
        with chorus.group():
            self.comm.send(np.ascontiguousarray(dx), self.s - 1)
            self.comm.recv(a, self.s - 1)
        return a

    # ---- compute: the last stage turns its output into the loss and its gradient ----

    def forward(self, m, a):
        y = self.stage.forward(m, a)
        if self.last:
            err = y - self.t[self.mb[m]]
            self.loss += 0.5 * float(np.sum(err * err))
            self.loss_grad[m] = err / self.args.batch
        return y

    def backward(self, m, g):
        if self.last:
            g = self.loss_grad.pop(m)
        return self.stage.backward(m, g)

    # ---- schedules ----

    def gpipe(self, M):
        for m in range(M):
            self.send_forward(self.forward(m, self.recv_forward(m)))
        for m in range(M):
            self.send_backward(self.backward(m, self.recv_backward(m)))

    def one_f_one_b(self, M):
        warmup = min(self.n - 1 - self.s, M)
        steady = M - warmup
        f = b = 0  # next micro-batch to run forward / backward
        for _ in range(warmup):
            self.send_forward(self.forward(f, self.recv_forward(f)))
            f += 1
        a = self.recv_forward(f) if steady > 0 else None
        for i in range(steady):
            y = self.forward(f, a)
            f += 1
            g = self.send_forward_recv_backward(y, b)
            dx = self.backward(b, g)
            b += 1
            if i == steady - 1:
                self.send_backward(dx)
            else:
                a = self.send_backward_recv_forward(dx, f)
        for _ in range(warmup):
            self.send_backward(self.backward(b, self.recv_backward(b)))
            b += 1

    def train_step(self, idx):
        self.mb = np.array_split(idx, self.args.micro_batches)
        self.loss, self.loss_grad = 0.0, {}
        self.stage.zero_grad()
        if self.args.schedule == "gpipe":
            self.gpipe(len(self.mb))
        else:
            self.one_f_one_b(len(self.mb))
        assert not self.stage.stash
        self.stage.step(self.args.lr)
        return self.loss / len(idx)


def train_reference(args, widths, x, t):
    """The whole model in one process, each step on the whole batch at once."""
    model = Stage(range(len(widths) - 1), widths, args.seed)
    losses = []
    for step in range(args.steps):
        idx = batch_indices(args, len(x), step)
        model.zero_grad()
        y = model.forward(0, x[idx])
        err = y - t[idx]
        losses.append(0.5 * float(np.sum(err * err)) / len(idx))
        model.backward(0, err / len(idx))
        model.step(args.lr)
    return model, np.array(losses)


def main():
    args = parse_args()
    with chorus.Communicator.from_env() as comm:
        layers = args.layers if args.layers is not None else max(2, 2 * comm.size)
        if layers < comm.size:
            raise SystemExit("--layers %d: need at least one layer per rank (%d)"
                             % (layers, comm.size))
        if args.batch < args.micro_batches:
            raise SystemExit("--batch must be at least --micro-batches")
        widths = [args.features] + [args.hidden] * (layers - 1) + [1]
        x, t = make_data(args)
        pipe = Pipeline(comm, args, widths, x, t)
        say = print if comm.rank == 0 else (lambda *a, **k: None)
        say("pipeline parallel: %d stages, %d layers (%s per stage), %d micro-batches of a "
            "batch of %d, schedule %s, %d steps"
            % (comm.size, layers, "/".join(str(len(b)) for b in
                                           np.array_split(np.arange(layers), comm.size)),
               args.micro_batches, args.batch, args.schedule, args.steps))
        start = time.perf_counter()
        losses = np.zeros(args.steps)
        for step in range(args.steps):
            losses[step] = pipe.train_step(batch_indices(args, len(x), step))
        took = time.perf_counter() - start
        comm.broadcast(losses, root=comm.size - 1)  # the last stage computed them
        every = max(1, args.steps // 6)
        for i in sorted(set(range(0, args.steps, every)) | {args.steps - 1}):
            say("  step %4d  loss %.6f" % (i, losses[i]))
        peaks = comm.all_gather(np.array([pipe.stage.peak_stash], dtype=np.int64)).ravel()
        say("trained in %.2f s; most micro-batches stashed at once, by stage: %s"
            % (took, " ".join(str(p) for p in peaks)))

        ref, ref_losses = train_reference(args, widths, x, t)
        ref_params = np.concatenate([np.concatenate([ref.W[i].ravel() for i in pipe.stage.ids]),
                                     np.concatenate([ref.b[i].ravel() for i in pipe.stage.ids])])
        mine = pipe.stage.flat()
        errs = np.array([np.max(np.abs(mine - ref_params)) / np.max(np.abs(ref_params)),
                         np.max(np.abs(losses - ref_losses) / np.abs(ref_losses))])
        comm.all_reduce(errs, errs, op="max")
        say("single-process reference: max relative difference: parameters %.2e, losses %.2e"
            % (errs[0], errs[1]))
        if not np.all(errs <= 1e-9):
            if comm.rank == 0:
                print("FAILED: the pipeline did not train the same model as one process",
                      file=sys.stderr)
            return 1
        say("OK: %d stage%s (%s) trained the same model as one process"
            % (comm.size, "s" if comm.size > 1 else "", args.schedule))
        return 0


if __name__ == "__main__":
    sys.exit(main())
