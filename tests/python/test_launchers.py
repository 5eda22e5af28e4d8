"""Chorus from Python under the launchers users have: chorusrun, torchrun's variables, Open
MPI's and Slurm's; and a peer that dies gives an exception, not a hang."""

import os
import re
import subprocess
import sys

import pytest

from conftest import HERE, free_port, spawn

LAUNCHER_VARS = ["CHORUS_RANK", "CHORUS_NRANKS", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                 "CHORUS_COMM_ID", "NCCL_COMM_ID", "MASTER_ADDR", "MASTER_PORT"]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for v in LAUNCHER_VARS:
        monkeypatch.delenv(v, raising=False)


def check_results(lines, n):
    got = sorted(re.findall(r"RESULT (\d+) (\d+) \[([^\]]*)\]", lines))
    assert [int(r) for r, _, _ in got] == list(range(n)), lines
    want = float(n * (n + 1) // 2)
    for _, size, values in got:
        assert int(size) == n
        assert [float(v) for v in values.split(",")] == [want] * 4


def test_chorusrun():
    chorusrun = os.environ.get("CHORUSRUN")
    if not chorusrun:
        pytest.skip("CHORUSRUN (the built chorusrun) is not set")
    p = subprocess.run([chorusrun, "-n", "3", sys.executable,
                        os.path.join(HERE, "ranks", "allreduce_env.py")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    check_results(p.stdout, 3)


@pytest.mark.parametrize("style", ["torchrun", "openmpi", "slurm"])
def test_launcher_variables(style):
    n, port = 3, free_port()

    def env_of(r):
        if style == "torchrun":
            return {"RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        if style == "openmpi":
            return {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(n),
                    "CHORUS_COMM_ID": "127.0.0.1:%d" % port}
        return {"SLURM_PROCID": str(r), "SLURM_NTASKS": str(n), "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port)}

    out = spawn("allreduce_env.py", n, env_of)
    for rc, text in out:
        assert rc == 0, text
    check_results("".join(t for _, t in out), n)


def test_dead_peer_raises_instead_of_hanging():
    port = free_port()
    out = spawn("dead_peer.py", 2, lambda r: {"RANK": str(r), "WORLD_SIZE": "2",
                                              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                              "CHORUS_TIMEOUT": "30"})
    rc, text = out[0]
    m = re.search(r"ERROR ([\d.]+) s (\w+) (.*)", text)
    assert m, text
    assert float(m.group(1)) < 30, text
    assert "rank 1" in m.group(3), text
