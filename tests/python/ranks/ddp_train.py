"""One rank of a small DistributedDataParallel training run on the backend named in argv[1];
writes the final parameters to argv[2] (rank 0)."""
import sys

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401 - registers the backend

backend, out = sys.argv[1], sys.argv[2]
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
dist.init_process_group(backend)
r = dist.get_rank()
torch.manual_seed(0)  # the same initial model everywhere
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
gen = torch.Generator().manual_seed(100 + r)  # each rank its own batches
for _ in range(steps):
    x = torch.randn(16, 32, generator=gen)
    y = torch.randn(16, 8, generator=gen)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
if r == 0:
    torch.save([p.detach().clone() for p in model.parameters()], out)
dist.destroy_process_group()
