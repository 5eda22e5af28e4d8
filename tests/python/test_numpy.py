"""The Python package on numpy arrays: every collective and send/recv on 1-4 ranks (threads of
this process) against numpy's own arithmetic, the 16-bit and 8-bit float types passed as raw
arrays, groups, and the errors bad arguments raise."""

import pickle

import numpy as np
import pytest

import chorus
from conftest import run_ranks

NUMERIC = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]


def data(rank, n, dtype, salt=0):
    """Small integers (exact in every type, also summed over 4 ranks)."""
    return ((np.arange(n) * 3 + rank * 5 + salt) % 7 + 1).astype(dtype)


def reference(op, arrays):
    stack = np.stack([a.astype(np.float64) for a in arrays])
    if op == "sum":
        return stack.sum(0)
    if op == "prod":
        return stack.prod(0)
    if op == "max":
        return stack.max(0)
    if op == "min":
        return stack.min(0)
    if op == "avg":
        return stack.sum(0) / len(arrays)
    raise ValueError(op)


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "avg"])
def test_all_reduce_every_type_and_op(comms, dtype, op):
    n = len(comms)
    count = 1001
    inputs = [data(r, count, dtype) for r in range(n)]
    want = reference(op, inputs)
    if np.dtype(dtype).kind in "iu":
        # Integer average truncates; products wrap around in the type's width.
        want = np.trunc(want).astype(np.int64).astype(dtype).astype(np.float64)
    out = run_ranks(comms, lambda c: c.all_reduce(inputs[c.rank], op=op))
    for r in range(n):
        assert out[r].dtype == np.dtype(dtype)
        np.testing.assert_allclose(out[r].astype(np.float64), want, rtol=2e-3 if dtype == "float16" else 1e-6)


def test_in_place_and_shapes(comms):
    n = len(comms)
    arrays = [data(r, 24, np.float32).reshape(2, 3, 4) for r in range(n)]
    want = reference("sum", [a.copy() for a in arrays])

    def body(c):
        x = arrays[c.rank]
        got = c.all_reduce(x, x)
        assert got is x
        return x

    out = run_ranks(comms, body)
    for r in range(n):
        assert out[r].shape == (2, 3, 4)
        np.testing.assert_array_equal(out[r], want)


def test_broadcast_reduce_gather_scatter(comms):
    n = len(comms)
    root = n - 1

    def body(c):
        res = {}
        buf = data(c.rank, 100, np.int64) if c.rank == root else np.zeros(100, np.int64)
        res["bcast"] = c.broadcast(buf, root=root).copy()
        res["reduce"] = c.reduce(data(c.rank, 50, np.float64), op="max", root=0)
        res["gather"] = c.gather(data(c.rank, 10, np.int32), root=root)
        send = np.arange(n * 6, dtype=np.float32).reshape(n, 6) + 100 if c.rank == root else None
        res["scatter"] = c.scatter(send, np.zeros(6, np.float32), root=root)
        return res

    out = run_ranks(comms, body)
    for r in range(n):
        np.testing.assert_array_equal(out[r]["bcast"], data(root, 100, np.int64))
        if r == 0:
            np.testing.assert_array_equal(
                out[r]["reduce"], reference("max", [data(k, 50, np.float64) for k in range(n)]))
        else:
            assert out[r]["reduce"] is None
        if r == root:
            np.testing.assert_array_equal(out[r]["gather"],
                                          np.stack([data(k, 10, np.int32) for k in range(n)]))
        else:
            assert out[r]["gather"] is None
        np.testing.assert_array_equal(out[r]["scatter"], np.arange(6, dtype=np.float32) + 100 + 6 * r)


def test_all_gather_reduce_scatter_all_to_all(comms):
    n = len(comms)

    def body(c):
        gathered = c.all_gather(data(c.rank, 33, np.uint8))
        rs = c.reduce_scatter(np.stack([data(c.rank, 8, np.float64, salt=b) for b in range(n)]))
        a2a = c.all_to_all(np.arange(n * 3, dtype=np.int64).reshape(n, 3) + 1000 * c.rank)
        return gathered, rs, a2a

    out = run_ranks(comms, body)
    for r in range(n):
        gathered, rs, a2a = out[r]
        assert gathered.shape == (n, 33)
        np.testing.assert_array_equal(gathered, np.stack([data(k, 33, np.uint8) for k in range(n)]))
        np.testing.assert_array_equal(
            rs, reference("sum", [data(k, 8, np.float64, salt=r) for k in range(n)]))
        np.testing.assert_array_equal(a2a, np.stack([np.arange(3) + 3 * r + 1000 * s for s in range(n)]))


def test_send_recv_ring_in_a_group(comms):
    n = len(comms)

    def body(c):
        out = np.zeros(5000, np.float32)
        with chorus.group():
            c.send(data(c.rank, 5000, np.float32), (c.rank + 1) % n)
            c.recv(out, (c.rank - 1) % n)
        return out

    out = run_ranks(comms, body)
    for r in range(n):
        np.testing.assert_array_equal(out[r], data((r - 1) % n, 5000, np.float32))


def test_split_by_parity_with_keys_reversing_the_order(comms):
    n = len(comms)

    def body(c):
        sub = c.split(c.rank % 2, key=-c.rank)
        members = sorted((r for r in range(n) if r % 2 == c.rank % 2), reverse=True)
        try:
            assert (sub.rank, sub.size) == (members.index(c.rank), len(members))
            # Ranks of the new communicator talk only among themselves.
            total = sub.all_reduce(np.array([c.rank], np.int64))
            first = sub.broadcast(np.array([c.rank], np.int64), root=0)
        finally:
            sub.destroy()
        return total[0], first[0]

    out = run_ranks(comms, body)
    for r in range(n):
        members = [m for m in range(n) if m % 2 == r % 2]
        assert out[r] == (sum(members), max(members))


def test_split_without_a_color_gives_none(comms):
    n = len(comms)

    def body(c):
        sub = c.split(None if c.rank == 0 else 7)
        if sub is None:
            return None
        try:
            return sub.size, sub.all_reduce(np.ones(3, np.float32))[0]
        finally:
            sub.destroy()

    out = run_ranks(comms, body)
    assert out[0] is None
    for r in range(1, n):
        assert out[r] == (n - 1, float(n - 1))
    with pytest.raises(chorus.InvalidArgumentError, match="color"):
        comms[0].split(-3)
    with pytest.raises(chorus.InvalidArgumentError, match="key"):
        comms[0].split(0, key="first")


def test_shrink_leaves_out_rank_zero(comms):
    n = len(comms)
    if n < 2:
        pytest.skip("needs a rank left after the shrink")

    def body(c):
        if c.rank == 0:
            return None  # an excluded rank does not call it
        sub = c.shrink([0])
        try:
            return sub.rank, sub.size, sub.all_reduce(np.array([c.rank], np.int64))[0]
        finally:
            sub.destroy()

    out = run_ranks(comms, body)
    for r in range(1, n):
        assert out[r] == (r - 1, n - 1, sum(range(1, n)))
    with pytest.raises(chorus.InvalidArgumentError, match="holds this rank"):
        comms[0].shrink([0])


def bf16_bits(x):
    """float32 -> bfloat16 bits (round to nearest even), computed here independently."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def test_bfloat16_and_fp8_as_raw_arrays(comms):
    n = len(comms)
    values = [data(r, 64, np.float32) for r in range(n)]

    def body(c):
        got = c.all_reduce(bf16_bits(values[c.rank]), dtype="bfloat16")
        # e4m3 bits of small integers: 1.0 = 0x38, 2.0 = 0x40; max picks the larger encoding.
        e4m3 = np.full(16, 0x38 if c.rank % 2 == 0 else 0x40, np.uint8)
        mx = c.all_reduce(e4m3, op="max", dtype="float8_e4m3")
        return got, mx

    out = run_ranks(comms, body)
    for r in range(n):
        got, mx = out[r]
        assert got.dtype == np.uint16
        np.testing.assert_array_equal(bf16_value(got), reference("sum", values))
        np.testing.assert_array_equal(mx, np.full(16, 0x40 if n > 1 else 0x38, np.uint8))


def test_premul_sum(comms):
    n = len(comms)
    out = run_ranks(comms, lambda c: c.all_reduce(data(c.rank, 40, np.float64),
                                                  op=chorus.PreMulSum(0.5)))
    want = 0.5 * reference("sum", [data(r, 40, np.float64) for r in range(n)])
    for r in range(n):
        np.testing.assert_allclose(out[r], want)


def test_premul_scalar_is_copied_at_creation(monkeypatch):
    """The scalar's array lives only while the op is made: the op must copy the value
    (ncclScalarHostImmediate), not keep the array's address and read freed memory later."""
    from chorus import _comm
    made = []
    real = _comm.lib.ncclRedOpCreatePreMulSum

    def spy(op, scalar, datatype, residence, comm):
        made.append(residence)
        return real(op, scalar, datatype, residence, comm)

    monkeypatch.setattr(_comm.lib, "ncclRedOpCreatePreMulSum", spy)
    (c,) = chorus.init_all(1)
    try:
        for _ in range(3):
            out = c.all_reduce(np.arange(8, dtype=np.float32), op=chorus.PreMulSum(2.0))
            np.testing.assert_array_equal(out, 2 * np.arange(8, dtype=np.float32))
    finally:
        c.destroy()
    assert made == [1]  # once per communicator, type and scalar; 1: ncclScalarHostImmediate


def test_buffer_protocol_objects_are_taken():
    (c,) = chorus.init_all(1)
    try:
        b = bytearray(b"\x01\x02\x03")
        out = bytearray(3)
        c.all_reduce(b, out)
        assert out == b
    finally:
        c.destroy()


def test_bad_arguments_raise_clear_errors():
    (c,) = chorus.init_all(1)
    try:
        with pytest.raises(ValueError, match="holds 4 elements but the call needs 3"):
            c.all_reduce(np.zeros(3, np.float32), np.zeros(4, np.float32))
        with pytest.raises(TypeError, match="recvbuf is float64"):
            c.all_reduce(np.zeros(3, np.float32), np.zeros(3, np.float64))
        with pytest.raises(ValueError, match="C-contiguous"):
            c.all_reduce(np.zeros((4, 4), np.float32)[:, 1])
        with pytest.raises(ValueError, match="read-only"):
            ro = np.zeros(3, np.float32)
            ro.flags.writeable = False
            c.all_reduce(np.zeros(3, np.float32), ro)
        with pytest.raises(TypeError, match="bool"):
            c.all_reduce(np.zeros(3, bool))
        with pytest.raises(TypeError, match="complex128 has no Chorus type"):
            c.all_reduce(np.zeros(3, np.complex128))
        with pytest.raises(chorus.InvalidArgumentError, match="dtype 'float128x'"):
            c.all_reduce(np.zeros(4, np.uint8), dtype="float128x")
        with pytest.raises(chorus.InvalidArgumentError, match="op 'xor'"):
            c.all_reduce(np.zeros(3, np.float32), op="xor")
        with pytest.raises(chorus.InvalidArgumentError, match="root 3 is outside"):
            c.broadcast(np.zeros(3), root=3)
        with pytest.raises(chorus.InvalidArgumentError, match="peer -1 is outside"):
            c.send(np.zeros(3), -1)
        # An error from the library itself carries its message and code.
        buf = np.zeros(8, np.float32)
        with pytest.raises(chorus.InvalidArgumentError) as e:
            c.all_reduce(buf[0:4], buf[2:6])
        assert e.value.name == "ncclInvalidArgument"
        assert "ncclAllReduce" in str(e.value) and "overlap" in str(e.value)
    finally:
        c.destroy()
    with pytest.raises(chorus.InvalidUsageError, match="destroyed"):
        c.barrier()


def test_unique_id_pickles_and_checks_its_size():
    uid = chorus.UniqueId()
    assert pickle.loads(pickle.dumps(uid)).data == uid.data
    with pytest.raises(ValueError, match="128 bytes"):
        chorus.UniqueId(b"short")


def test_from_env_without_a_launcher_says_what_is_missing(monkeypatch):
    for v in ["CHORUS_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"]:
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(chorus.InvalidUsageError, match="no rank and size"):
        chorus.Communicator.from_env()
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(chorus.InvalidArgumentError, match="RANK=2 is outside"):
        chorus.Communicator.from_env()
