"""The torch.distributed backend "chorus": every call on 2 and 3 processes, and DDP training
that ends with the same parameters as the same run on gloo."""

import os

import pytest

torch = pytest.importorskip("torch")

from conftest import free_port, spawn  # noqa: E402


def torch_env(n, port):
    return lambda r: {"RANK": str(r), "WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("n", [2, 3])
def test_backend_calls(n):
    out = spawn("torch_backend.py", n, torch_env(n, free_port()), timeout=180)
    for r, (rc, text) in enumerate(out):
        assert rc == 0 and ("OK %d" % r) in text, text


@pytest.mark.parametrize("n", [2, 4])
def test_ddp_matches_gloo(n, tmp_path):
    params = {}
    for backend in ("gloo", "chorus"):
        path = str(tmp_path / ("%s.pt" % backend))
        out = spawn("ddp_train.py", n, torch_env(n, free_port()), timeout=180,
                    args=(backend, path))
        for rc, text in out:
            assert rc == 0, text
        params[backend] = torch.load(path)
    for a, b in zip(params["gloo"], params["chorus"]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a - b).abs().max()
    # The training moved the parameters (the comparison is not of two untouched models).
    torch.manual_seed(0)
    fresh = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    assert any(not torch.equal(a, p.detach()) for a, p in zip(params["chorus"], fresh.parameters()))
