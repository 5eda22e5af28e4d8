"""Shared pieces of the Python tests: rank threads in this process, and ranks as processes
started the way a launcher starts them."""

import os
import socket
import subprocess
import sys
import threading

import pytest

np = pytest.importorskip("numpy")
chorus = pytest.importorskip("chorus")

HERE = os.path.dirname(os.path.abspath(__file__))


def run_ranks(comms, fn):
    """fn(comm) on a thread per rank; returns the results by rank, raising the first error."""
    results = [None] * len(comms)
    errors = []

    def body(c):
        try:
            results[c.rank] = fn(c)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(c,)) for c in comms]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a rank did not finish within 120 s"
    if errors:
        raise errors[0]
    return results


@pytest.fixture(scope="module", params=[1, 2, 3, 4], ids=lambda n: "%dranks" % n)
def comms(request):
    cs = chorus.init_all(request.param)
    yield cs
    for c in cs:
        c.destroy()


def free_port():
    """A loopback port that was free a moment ago, and so was the next one (Chorus's from_env
    puts its rendezvous at MASTER_PORT + 1, beside torch's store)."""
    for _ in range(100):
        with socket.socket() as s, socket.socket() as t:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            try:
                t.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("no two free loopback ports in a row")


def spawn(script, nranks, env_of, timeout=120, args=()):
    """Starts nranks processes of `script` (in tests/python/ranks/) with env_of(rank) added to
    the environment; returns (returncode, output) per rank."""
    procs = []
    for r in range(nranks):
        env = dict(os.environ)
        env.update(env_of(r))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "ranks", script)] + list(args), env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    out = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("%s did not finish within %d s" % (script, timeout))
        out.append((p.returncode, text))
    return out
