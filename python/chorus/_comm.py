"""Communicators and collectives on host memory (numpy arrays and anything numpy can view without
a copy: the buffer protocol, __array_interface__)."""

import contextlib
import ctypes
import os
import threading

import numpy as np

from . import _lib
from ._lib import InvalidArgumentError, UniqueIdStruct, check, lib

# ncclDataType_t by name; bfloat16 and the fp8 types travel in uint16/uint8 arrays with an
# explicit dtype= argument (numpy has no such types; an ml_dtypes array is taken by its name).
DTYPES = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "uint32": 3,
    "int64": 4,
    "uint64": 5,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
    "float8_e4m3": 10,
    "float8_e5m2": 11,
}
_ITEMSIZE = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}
_ALIASES = {"float8_e4m3fn": "float8_e4m3", "half": "float16", "float": "float32",
            "double": "float64", "bf16": "bfloat16"}

# ncclRedOp_t by name.
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}


class PreMulSum:
    """The reduction sum(scalar * x) (ncclRedOpCreatePreMulSum), e.g. op=chorus.PreMulSum(0.5)."""

    def __init__(self, scalar):
        self.scalar = scalar


def _type_code(name):
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise InvalidArgumentError(
            4, "dtype %r is not one Chorus moves (accepted: %s)" % (name, ", ".join(DTYPES)))
    return DTYPES[name]


class _Buf:
    """A validated view of one buffer argument: its address, element type and element count."""

    __slots__ = ("array", "ptr", "type", "count")

    def __init__(self, obj, what, dtype, writable):
        arr = obj if isinstance(obj, np.ndarray) else np.asarray(obj)
        if arr.dtype == object:
            raise TypeError("%s: %r is not a numeric buffer" % (what, type(obj).__name__))
        if not arr.flags.c_contiguous:
            raise ValueError("%s must be C-contiguous (pass np.ascontiguousarray(...))" % what)
        if writable and not arr.flags.writeable:
            raise ValueError("%s is read-only, but the call writes into it" % what)
        if dtype is not None:
            code = _type_code(dtype)
            if arr.nbytes % _ITEMSIZE[code] != 0:
                raise ValueError(
                    "%s: %d bytes are not a whole number of %s elements" % (what, arr.nbytes, dtype))
        else:
            name = arr.dtype.name
            if name == "bool":
                raise TypeError("%s: bool arrays have no Chorus type; view them as uint8" % what)
            if name not in DTYPES and _ALIASES.get(name) not in DTYPES:
                raise TypeError(
                    "%s: numpy dtype %s has no Chorus type (int8/16..., float16/32/64; pass "
                    "dtype='bfloat16' or 'float8_e4m3'/'float8_e5m2' for raw uint16/uint8 data)"
                    % (what, name))
            code = _type_code(name)
        self.array = arr
        self.ptr = arr.ctypes.data if arr.nbytes else 0
        self.type = code
        self.count = arr.nbytes // _ITEMSIZE[code]


def _same_type(a, b, what_a, what_b):
    if a.type != b.type:
        names = {v: k for k, v in DTYPES.items()}
        raise TypeError("%s is %s but %s is %s" % (what_a, names[a.type], what_b, names[b.type]))


_group_state = threading.local()


def _in_group():
    return getattr(_group_state, "depth", 0) > 0


def _keep(*objs):
    """Buffers of calls queued in an open group stay alive until the group ends."""
    if _in_group():
        _group_state.held.extend(objs)


@contextlib.contextmanager
def group():
    """ncclGroupStart/End: the calls inside run together when the block ends (sends and receives
    between ranks that depend on each other must be in one group)."""
    check(lib.ncclGroupStart())
    if not _in_group():
        _group_state.held = []
    _group_state.depth = getattr(_group_state, "depth", 0) + 1
    ok = False
    try:
        yield
        ok = True
    finally:
        _group_state.depth -= 1
        result = lib.ncclGroupEnd()
        if _group_state.depth == 0:
            _group_state.held = []
        if ok:
            check(result)


class UniqueId:
    """The rendezvous id of a clique (ncclUniqueId): made by one rank, passed to all (it pickles
    as its 128 bytes)."""

    def __init__(self, data=None):
        if data is None:
            s = UniqueIdStruct()
            check(lib.ncclGetUniqueId(ctypes.byref(s)))
            data = ctypes.string_at(ctypes.addressof(s), _lib.NCCL_UNIQUE_ID_BYTES)
        data = bytes(data)
        if len(data) != _lib.NCCL_UNIQUE_ID_BYTES:
            raise ValueError("a unique id is %d bytes, not %d" % (_lib.NCCL_UNIQUE_ID_BYTES, len(data)))
        self.data = data

    def _struct(self):
        s = UniqueIdStruct()
        ctypes.memmove(ctypes.addressof(s), self.data, len(self.data))
        return s

    def __reduce__(self):
        return (UniqueId, (self.data,))

    def __bytes__(self):
        return self.data


def _env_int(names):
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            try:
                return int(v), n
            except ValueError:
                raise InvalidArgumentError(4, "%s=%r is not an integer" % (n, v))
    return None, None


class Communicator:
    """One rank of a clique of `size` ranks on host memory.

    Communicator(rank, size, unique_id) joins the clique (every rank calls it with the same id);
    Communicator.from_env() takes rank, size and rendezvous from the launcher's variables.
    Collectives block until done (inside `with chorus.group():` until the block ends) and take
    numpy arrays; results land in recvbuf (allocated and returned when not given)."""

    def __init__(self, rank, size, unique_id):
        if not isinstance(unique_id, UniqueId):
            unique_id = UniqueId(unique_id)
        handle = ctypes.c_void_p()
        check(lib.chorusCommInitRankHost(ctypes.byref(handle), int(size), unique_id._struct(),
                                         int(rank), None))
        self._handle = handle
        self.rank = int(rank)
        self.size = int(size)
        self._ops = {}

    @classmethod
    def from_env(cls):
        """Rank and size from chorusrun (CHORUS_RANK/CHORUS_NRANKS), torchrun (RANK/WORLD_SIZE),
        Open MPI (OMPI_COMM_WORLD_RANK/SIZE), MPICH (PMI_RANK/PMI_SIZE) or Slurm
        (SLURM_PROCID/SLURM_NTASKS); the rendezvous from CHORUS_COMM_ID / NCCL_COMM_ID (host:port,
        rank 0 listens there), else MASTER_ADDR:(MASTER_PORT+1), beside torch's store."""
        rank, rank_var = _env_int(["CHORUS_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                   "SLURM_PROCID"])
        size, size_var = _env_int(["CHORUS_NRANKS", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
                                   "PMI_SIZE", "SLURM_NTASKS"])
        if rank is None or size is None:
            raise _usage(
                "no rank and size in the environment: launch with chorusrun, torchrun, mpirun "
                "or srun, or set RANK and WORLD_SIZE")
        if not 0 <= rank < size:
            raise InvalidArgumentError(4, "%s=%d is outside [0, %s=%d)" % (rank_var, rank, size_var, size))
        if not (os.environ.get("CHORUS_COMM_ID") or os.environ.get("NCCL_COMM_ID")):
            addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
            if not addr or not port:
                raise _usage(
                    "no rendezvous address: set CHORUS_COMM_ID (host:port, where rank 0 listens) "
                    "or MASTER_ADDR and MASTER_PORT")
            try:
                port = int(port)
            except ValueError:
                raise InvalidArgumentError(4, "MASTER_PORT=%r is not a port number" % port)
            # The port above torch's: a torchrun job's store listens on MASTER_PORT itself (the
            # perf tools do the same).
            os.environ["CHORUS_COMM_ID"] = "%s:%d" % (addr, port + 1)
        return cls(rank, size, UniqueId())

    @classmethod
    def _adopt(cls, handle):
        """A Communicator for a handle the library made (ncclCommSplit)."""
        self = cls.__new__(cls)
        self._handle = handle
        self._ops = {}
        value = ctypes.c_int()
        check(lib.ncclCommUserRank(handle, ctypes.byref(value)), handle)
        self.rank = value.value
        check(lib.ncclCommCount(handle, ctypes.byref(value)), handle)
        self.size = value.value
        return self

    def split(self, color, key=None):
        """A new communicator of the ranks that pass the same color (ncclCommSplit: every rank
        of this communicator calls it, in the same order as its other collectives). Ranks are
        numbered by key, then by their rank here (key defaults to this rank). color=None: this
        rank joins none and gets None."""
        if color is not None and (isinstance(color, bool) or not isinstance(color, int) or color < 0):
            raise InvalidArgumentError(4, "color %r must be an int >= 0, or None" % (color,))
        if key is not None and (isinstance(key, bool) or not isinstance(key, int)):
            raise InvalidArgumentError(4, "key %r must be an int" % (key,))
        h = self._h()
        out = ctypes.c_void_p()
        check(lib.ncclCommSplit(h, -1 if color is None else color,
                                self.rank if key is None else key, ctypes.byref(out), None), h)
        return Communicator._adopt(out) if out.value else None

    def shrink(self, exclude, abort=False):
        """A new communicator of the ranks not in `exclude` (ncclCommShrink: those ranks call
        it with the same list; the excluded ones do not). Works on a communicator whose peer
        failed; abort=True first stops whatever still waits in this one."""
        try:
            ranks = [int(r) for r in exclude]
        except (TypeError, ValueError):
            raise InvalidArgumentError(4, "exclude %r must be a list of ranks" % (exclude,))
        h = self._h()
        arr = (ctypes.c_int * max(len(ranks), 1))(*ranks)
        out = ctypes.c_void_p()
        check(lib.ncclCommShrink(h, arr, len(ranks), ctypes.byref(out), None, 1 if abort else 0), h)
        return Communicator._adopt(out)

    # ---- lifetime ----

    def _h(self):
        if self._handle is None:
            raise _usage("the communicator was destroyed")
        return self._handle

    def destroy(self):
        """Frees the communicator (ncclCommDestroy); later calls raise."""
        if self._handle is not None:
            for op in self._ops.values():
                lib.ncclRedOpDestroy(op, self._handle)
            self._ops = {}
            h, self._handle = self._handle, None
            check(lib.ncclCommDestroy(h))

    def abort(self):
        """Stops the communicator at once (ncclCommAbort): calls in other threads return errors."""
        if self._handle is not None:
            h, self._handle = self._handle, None
            check(lib.ncclCommAbort(h))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.destroy()
        else:
            self.abort()

    def __repr__(self):
        return "<chorus.Communicator rank %d of %d%s>" % (
            self.rank, self.size, "" if self._handle is not None else ", destroyed")

    # ---- helpers ----

    def _op(self, op, type_code):
        if isinstance(op, PreMulSum):
            key = (type_code, op.scalar)
            if key not in self._ops:
                scalar = _scalar_bytes(op.scalar, type_code)
                made = ctypes.c_int()
                # Copied at creation (ncclScalarHostImmediate): `scalar` is gone once this
                # returns, so the op must not keep its address (ncclScalarDevice would).
                check(lib.ncclRedOpCreatePreMulSum(ctypes.byref(made), scalar.ctypes.data,
                                                   type_code, 1, self._h()), self._h())
                self._ops[key] = made.value
            return self._ops[key]
        if isinstance(op, str) and op.lower() in OPS:
            return OPS[op.lower()]
        raise InvalidArgumentError(
            4, "op %r is not a reduction (accepted: %s, or chorus.PreMulSum(scalar))"
            % (op, ", ".join(OPS)))

    def _out(self, recvbuf, like, count, dtype, shape=None, what="recvbuf"):
        """recvbuf checked (as dtype when given), or a new array of count elements like sendbuf."""
        if recvbuf is None:
            arr = np.empty(shape if shape is not None else (count,), dtype=like.array.dtype)
            if arr.nbytes != count * _ITEMSIZE[like.type]:
                arr = np.empty(count * _ITEMSIZE[like.type] // like.array.dtype.itemsize,
                               dtype=like.array.dtype)
            recvbuf = arr
        out = _Buf(recvbuf, what, dtype, True)
        _same_type(like, out, "sendbuf", what)
        if out.count != count:
            raise ValueError("%s holds %d elements but the call needs %d" % (what, out.count, count))
        return out

    def _check_peer(self, peer, what):
        if not isinstance(peer, (int, np.integer)) or not 0 <= int(peer) < self.size:
            raise InvalidArgumentError(4, "%s %r is outside [0, %d)" % (what, peer, self.size))
        return int(peer)

    def _done(self, out):
        return out.array if out is not None else None

    # ---- collectives ----

    def all_reduce(self, sendbuf, recvbuf=None, op="sum", dtype=None):
        """recvbuf = op over all ranks of sendbuf (recvbuf may be sendbuf: in place)."""
        s = _Buf(sendbuf, "sendbuf", dtype, False)
        r = s if recvbuf is sendbuf else self._out(recvbuf, s, s.count, dtype, s.array.shape)
        h = self._h()
        _keep(s, r)
        check(lib.ncclAllReduce(s.ptr, r.ptr, s.count, s.type, self._op(op, s.type), h, None), h)
        return r.array

    def broadcast(self, buf, root=0, recvbuf=None, dtype=None):
        """buf of root to every rank: in place in buf, or into recvbuf when given."""
        root = self._check_peer(root, "root")
        s = _Buf(buf, "buf", dtype, recvbuf is None)
        r = s if recvbuf is None or recvbuf is buf else self._out(recvbuf, s, s.count, dtype)
        h = self._h()
        _keep(s, r)
        check(lib.ncclBroadcast(s.ptr, r.ptr, s.count, s.type, root, h, None), h)
        return r.array

    def reduce(self, sendbuf, recvbuf=None, op="sum", root=0, dtype=None):
        """op over all ranks of sendbuf into root's recvbuf (other ranks get None back)."""
        root = self._check_peer(root, "root")
        s = _Buf(sendbuf, "sendbuf", dtype, False)
        r = None
        if self.rank == root:
            r = s if recvbuf is sendbuf else self._out(recvbuf, s, s.count, dtype, s.array.shape)
        h = self._h()
        _keep(s, r)
        check(lib.ncclReduce(s.ptr, r.ptr if r else None, s.count, s.type, self._op(op, s.type),
                             root, h, None), h)
        return self._done(r)

    def all_gather(self, sendbuf, recvbuf=None, dtype=None):
        """Every rank's sendbuf, in rank order, into recvbuf (new: shape (size, *sendbuf.shape))."""
        s = _Buf(sendbuf, "sendbuf", dtype, False)
        r = self._out(recvbuf, s, s.count * self.size, dtype, (self.size,) + s.array.shape)
        h = self._h()
        _keep(s, r)
        check(lib.ncclAllGather(s.ptr, r.ptr, s.count, s.type, h, None), h)
        return r.array

    def reduce_scatter(self, sendbuf, recvbuf=None, op="sum", dtype=None):
        """op over all ranks of sendbuf (size equal blocks); block `rank` of the result here."""
        s = _Buf(sendbuf, "sendbuf", dtype, False)
        if s.count % self.size != 0:
            raise ValueError("sendbuf holds %d elements, not a multiple of the %d ranks"
                             % (s.count, self.size))
        count = s.count // self.size
        shape = s.array.shape[1:] if s.array.shape[:1] == (self.size,) else (count,)
        r = self._out(recvbuf, s, count, dtype, shape)
        h = self._h()
        _keep(s, r)
        check(lib.ncclReduceScatter(s.ptr, r.ptr, count, s.type, self._op(op, s.type), h, None), h)
        return r.array

    def all_to_all(self, sendbuf, recvbuf=None, dtype=None):
        """Block p of sendbuf to rank p; block p of recvbuf from rank p (size equal blocks)."""
        s = _Buf(sendbuf, "sendbuf", dtype, False)
        if s.count % self.size != 0:
            raise ValueError("sendbuf holds %d elements, not a multiple of the %d ranks"
                             % (s.count, self.size))
        r = self._out(recvbuf, s, s.count, dtype, s.array.shape)
        h = self._h()
        _keep(s, r)
        check(lib.ncclAlltoAll(s.ptr, r.ptr, s.count // self.size, s.type, h, None), h)
        return r.array

    def gather(self, sendbuf, recvbuf=None, root=0, dtype=None):
        """Every rank's sendbuf into root's recvbuf in rank order (others get None back)."""
        root = self._check_peer(root, "root")
        s = _Buf(sendbuf, "sendbuf", dtype, False)
        r = None
        if self.rank == root:
            r = self._out(recvbuf, s, s.count * self.size, dtype, (self.size,) + s.array.shape)
        h = self._h()
        _keep(s, r)
        check(lib.ncclGather(s.ptr, r.ptr if r else None, s.count, s.type, root, h, None), h)
        return self._done(r)

    def scatter(self, sendbuf, recvbuf, root=0, dtype=None):
        """Block p of root's sendbuf into rank p's recvbuf (sendbuf is used on root only)."""
        root = self._check_peer(root, "root")
        r = _Buf(recvbuf, "recvbuf", dtype, True)
        s = None
        if self.rank == root:
            s = _Buf(sendbuf, "sendbuf", dtype, False)
            _same_type(s, r, "sendbuf", "recvbuf")
            if s.count != r.count * self.size:
                raise ValueError("sendbuf holds %d elements but the call needs %d (recvbuf's %d x "
                                 "%d ranks)" % (s.count, r.count * self.size, r.count, self.size))
        h = self._h()
        _keep(s, r)
        check(lib.ncclScatter(s.ptr if s else None, r.ptr, r.count, r.type, root, h, None), h)
        return r.array

    def send(self, buf, peer, dtype=None):
        """buf to peer (which posts a recv of the same size); in a group with the calls it
        depends on when both ranks send first."""
        peer = self._check_peer(peer, "peer")
        s = _Buf(buf, "buf", dtype, False)
        h = self._h()
        _keep(s)
        check(lib.ncclSend(s.ptr, s.count, s.type, peer, h, None), h)

    def recv(self, buf, peer, dtype=None):
        """Into buf from peer (which posts a send of the same size)."""
        peer = self._check_peer(peer, "peer")
        r = _Buf(buf, "buf", dtype, True)
        h = self._h()
        _keep(r)
        check(lib.ncclRecv(r.ptr, r.count, r.type, peer, h, None), h)
        return r.array

    def barrier(self):
        """Returns once every rank has called it (an all-reduce of one element)."""
        one = np.zeros(1, dtype=np.int32)
        self.all_reduce(one, one)


def _usage(message):
    return _lib.InvalidUsageError(5, message)


def _name_of(code):
    return {v: k for k, v in DTYPES.items()}[code]


def _scalar_bytes(value, code):
    """A PreMulSum scalar in the element type's encoding."""
    native = {0: np.int8, 1: np.uint8, 2: np.int32, 3: np.uint32, 4: np.int64, 5: np.uint64,
              6: np.float16, 7: np.float32, 8: np.float64}
    if code in native:
        return np.array([value], dtype=native[code])
    if code == DTYPES["bfloat16"]:
        bits = int(np.array([value], dtype=np.float32).view(np.uint32)[0])
        bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest, ties to even
        return np.array([bits >> 16], dtype=np.uint16)
    raise InvalidArgumentError(
        4, "PreMulSum scalars of %s are not supported from Python; use a 16-bit or wider type"
        % _name_of(code))


def init_all(size):
    """`size` communicators of one clique in this process (threads), as ncclCommInitAll; for
    tests and for driving several ranks from one program."""
    uid = UniqueId()
    comms = [None] * size
    errors = []

    def join(r):
        try:
            comms[r] = Communicator(r, size, uid)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=join, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for c in comms:
            if c is not None:
                c.abort()
        raise errors[0]
    return comms


def version():
    """(Chorus version string, NCCL API version code)."""
    v = ctypes.c_int()
    check(lib.ncclGetVersion(ctypes.byref(v)))
    return lib.chorusGetVersionString().decode(), v.value
