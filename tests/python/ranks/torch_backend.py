"""One rank of the torch backend check: every call DDP/FSDP-style code makes, on "chorus", each
result against what torch computes locally from the known inputs of all ranks."""
import sys

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401 - registers the backend

dist.init_process_group("chorus")
r, n = dist.get_rank(), dist.get_world_size()


def inp(rank, k=6, dtype=torch.float32):
    return (torch.arange(k, dtype=torch.float64) * 3 + rank * 5).remainder(7).add(1).to(dtype)


everyone = [inp(k) for k in range(n)]
ops = {dist.ReduceOp.SUM: torch.stack(everyone).sum(0),
       dist.ReduceOp.PRODUCT: torch.stack(everyone).prod(0),
       dist.ReduceOp.MAX: torch.stack(everyone).max(0).values,
       dist.ReduceOp.MIN: torch.stack(everyone).min(0).values}
for op, want in ops.items():
    t = inp(r)
    dist.all_reduce(t, op=op)
    assert torch.equal(t, want), (op, t, want)
if hasattr(dist.ReduceOp, "AVG"):
    t = inp(r)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.allclose(t, ops[dist.ReduceOp.SUM] / n)
for dtype in (torch.float16, torch.bfloat16, torch.int64, torch.float64):
    t = inp(r, dtype=dtype)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    fut.wait()
    assert torch.equal(t, torch.stack([inp(k, dtype=dtype) for k in range(n)]).sum(0)), dtype

b = inp(r) if r == n - 1 else torch.zeros(6)
dist.broadcast(b, n - 1)
assert torch.equal(b, inp(n - 1))

outs = [torch.zeros(6) for _ in range(n)]
dist.all_gather(outs, inp(r))
assert all(torch.equal(outs[k], inp(k)) for k in range(n))
flat = torch.zeros(6 * n)
gather_flat = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
gather_flat(flat, inp(r))
assert torch.equal(flat, torch.cat(everyone))

rs = torch.zeros(6)
dist.reduce_scatter(rs, [inp(r) * (k + 1) for k in range(n)])
assert torch.equal(rs, ops[dist.ReduceOp.SUM] * (r + 1))
rs_flat = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
big = torch.cat([inp(r) * (k + 1) for k in range(n)])
rs2 = torch.zeros(6)
rs_flat(rs2, big)
assert torch.equal(rs2, ops[dist.ReduceOp.SUM] * (r + 1))

red = inp(r)
dist.reduce(red, 0, op=dist.ReduceOp.MAX)
if r == 0:
    assert torch.equal(red, ops[dist.ReduceOp.MAX])

a = torch.arange(2 * n, dtype=torch.float32) + 100 * r
ao = torch.zeros(2 * n)
dist.all_to_all_single(ao, a)
assert torch.equal(ao, torch.cat([torch.arange(2 * r, 2 * r + 2, dtype=torch.float32) + 100 * s
                                  for s in range(n)]))
# Unequal splits: rank s sends s + 1 rows to every rank.
rows_in = [r + 1] * n
rows_out = [s + 1 for s in range(n)]
src = torch.full((sum(rows_in), 2), float(r))
dst = torch.zeros((sum(rows_out), 2))
dist.all_to_all_single(dst, src, rows_out, rows_in)
assert torch.equal(dst, torch.cat([torch.full((s + 1, 2), float(s)) for s in range(n)]))
lists_out = [torch.zeros(3) for _ in range(n)]
dist.all_to_all(lists_out, [torch.full((3,), float(10 * r + k)) for k in range(n)])
assert all(torch.equal(lists_out[s], torch.full((3,), float(10 * s + r))) for s in range(n))

g = [torch.zeros(6) for _ in range(n)] if r == 0 else None
dist.gather(inp(r), g, dst=0)
if r == 0:
    assert all(torch.equal(g[k], inp(k)) for k in range(n))
sc = torch.zeros(6)
dist.scatter(sc, [inp(k) for k in range(n)] if r == 0 else None, src=0)
assert torch.equal(sc, inp(r))

# Each rank sends before it receives: queued back to back, they run as one group.
x = torch.full((100000,), float(r))
y = torch.zeros(100000)
reqs = [dist.isend(x, (r + 1) % n), dist.irecv(y, (r - 1) % n)]
for q in reqs:
    q.wait()
assert torch.equal(y, torch.full((100000,), float((r - 1) % n)))
if n > 1:
    if r == 0:
        dist.send(torch.arange(5.), 1)
    elif r == 1:
        z = torch.zeros(5)
        dist.recv(z, 0)
        assert torch.equal(z, torch.arange(5.))
dist.barrier()

# Bad input: a clear exception.
for bad, what in ((torch.zeros(4, 4)[:, 0], "not contiguous"), (torch.zeros(3, dtype=torch.bool), "bool")):
    try:
        dist.all_reduce(bad)
        raise AssertionError("accepted " + what)
    except ValueError as e:
        assert what in str(e), e
print("OK", r, flush=True)
dist.destroy_process_group()
