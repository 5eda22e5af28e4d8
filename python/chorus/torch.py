"""The torch.distributed backend "chorus" for CPU tensors.

    import chorus.torch  # registers the backend
    torch.distributed.init_process_group("chorus", ...)   # env://, tcp://, or a store

Collectives and send/recv run in order on a worker thread of each process group, so they
return at once with a Work whose future completes when the data is there (DDP overlaps its
gradient all-reduces with the backward pass this way). Sends and receives queued back to back
run as one Chorus group, so two ranks may each send before they receive.
"""

import atexit
import queue
import threading
import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, _create_work_from_future
from torch.futures import Future

from . import _lib
from ._comm import Communicator, UniqueId
from ._lib import InvalidArgumentError, check, lib

_TYPES = {
    torch.int8: 0,
    torch.uint8: 1,
    torch.bool: 1,
    torch.int32: 2,
    torch.int64: 4,
    torch.float16: 6,
    torch.float32: 7,
    torch.float64: 8,
    torch.bfloat16: 9,
}

_OPS = {
    dist.ReduceOp.SUM: 0,
    dist.ReduceOp.PRODUCT: 1,
    dist.ReduceOp.MAX: 2,
    dist.ReduceOp.MIN: 3,
}
if hasattr(dist.ReduceOp, "AVG"):
    _OPS[dist.ReduceOp.AVG] = 4


def _type(t, what):
    if t.device.type != "cpu":
        raise InvalidArgumentError(
            4, "%s is on %s; the chorus backend takes CPU tensors" % (what, t.device))
    if not t.is_contiguous():
        raise InvalidArgumentError(4, "%s is not contiguous (call .contiguous() first)" % what)
    if t.dtype not in _TYPES:
        raise InvalidArgumentError(4, "%s has dtype %s, which Chorus does not move" % (what, t.dtype))
    return _TYPES[t.dtype]


def _op(op, t):
    # ReduceOp values arrive as ReduceOp or as its RedOpType, depending on the torch version.
    for k, v in _OPS.items():
        if op == k:
            if t.dtype == torch.bool and v in (0, 1, 4):
                raise InvalidArgumentError(4, "%s of bool tensors is not defined; use MAX or MIN" % op)
            return v
    raise InvalidArgumentError(4, "reduction %s is not supported by the chorus backend "
                                  "(SUM, PRODUCT, MIN, MAX, AVG)" % op)


class _Task:
    __slots__ = ("run", "future", "result", "p2p")

    def __init__(self, run, result, p2p=False):
        self.run = run
        self.future = Future()
        self.result = result
        self.p2p = p2p


class ProcessGroupChorus(ProcessGroup):
    """A torch ProcessGroup over one Chorus host communicator."""

    def __init__(self, store, rank, size, timeout=None):
        super().__init__(rank, size)
        # Rank 0 makes the rendezvous id; the others read it from the group's store.
        key = "chorus_unique_id"
        if rank == 0:
            uid = UniqueId()
            store.set(key, uid.data)
        else:
            uid = UniqueId(store.get(key))
        self._comm = Communicator(rank, size, uid)
        self._queue = queue.Queue()
        self._worker = threading.Thread(target=self._loop, name="chorus-pg", daemon=True)
        self._worker.start()
        _live.add(self)

    # ---- the worker ----

    def _loop(self):
        pending = None
        while True:
            task = pending if pending is not None else self._queue.get()
            pending = None
            if task is None:
                return
            batch = [task]
            # Sends and receives queued back to back progress together.
            while task.p2p:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None or not nxt.p2p:
                    pending = nxt
                    break
                batch.append(nxt)
            try:
                if len(batch) > 1:
                    check(lib.ncclGroupStart())
                    try:
                        for t in batch:
                            t.run()
                    finally:
                        check(lib.ncclGroupEnd(), self._comm._handle)
                else:
                    task.run()
            except Exception as e:  # noqa: BLE001 - handed to the waiters
                for t in batch:
                    t.future.set_exception(e)
                continue
            for t in batch:
                t.future.set_result(t.result)

    def _submit(self, run, result, p2p=False):
        task = _Task(run, result, p2p)
        self._queue.put(task)
        return _create_work_from_future(task.future)

    def _h(self):
        return self._comm._h()

    # ---- collectives ----

    def getBackendName(self):
        return "chorus"

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        for i, t in enumerate(tensors):
            _type(t, "tensors[%d]" % i)
            _op(op, t)
        h = self._h()

        def run():
            for t in tensors:
                check(lib.ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), _TYPES[t.dtype],
                                        _op(op, t), h, None), h)

        return self._submit(run, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        for i, t in enumerate(tensors):
            _type(t, "tensors[%d]" % i)
        h = self._h()

        def run():
            for t in tensors:
                check(lib.ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), _TYPES[t.dtype],
                                        root, h, None), h)

        return self._submit(run, tensors)

    def reduce(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        for i, t in enumerate(tensors):
            _type(t, "tensors[%d]" % i)
            _op(op, t)
        h = self._h()

        def run():
            for t in tensors:
                check(lib.ncclReduce(t.data_ptr(), t.data_ptr(), t.numel(), _TYPES[t.dtype],
                                     _op(op, t), root, h, None), h)

        return self._submit(run, tensors)

    def _allgather_base(self, output, input, opts=None):
        _type(input, "input")
        _type(output, "output")
        if output.dtype != input.dtype or output.numel() != input.numel() * self.size():
            raise InvalidArgumentError(
                4, "output must hold %d x %d elements of %s (it holds %d of %s)"
                % (self.size(), input.numel(), input.dtype, output.numel(), output.dtype))
        h = self._h()

        def run():
            check(lib.ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(),
                                    _TYPES[input.dtype], h, None), h)

        return self._submit(run, [output])

    def allgather(self, output_tensors, input_tensors, opts=None):
        n = self.size()
        for i, (outs, inp) in enumerate(zip(output_tensors, input_tensors)):
            _type(inp, "input_tensors[%d]" % i)
            if len(outs) != n or any(o.numel() != inp.numel() or o.dtype != inp.dtype for o in outs):
                raise InvalidArgumentError(
                    4, "output_tensors[%d] must be %d tensors like input_tensors[%d]" % (i, n, i))
        h = self._h()

        def run():
            for outs, inp in zip(output_tensors, input_tensors):
                flat = torch.empty(n * inp.numel(), dtype=inp.dtype)
                check(lib.ncclAllGather(inp.data_ptr(), flat.data_ptr(), inp.numel(),
                                        _TYPES[inp.dtype], h, None), h)
                for r, o in enumerate(outs):
                    o.copy_(flat[r * inp.numel():(r + 1) * inp.numel()].view_as(o))

        return self._submit(run, output_tensors)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self.allgather(output_lists, input_list, opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        _type(input, "input")
        _type(output, "output")
        _op(op, input)
        if output.dtype != input.dtype or input.numel() != output.numel() * self.size():
            raise InvalidArgumentError(
                4, "input must hold %d x %d elements of %s (it holds %d of %s)"
                % (self.size(), output.numel(), output.dtype, input.numel(), input.dtype))
        h = self._h()

        def run():
            check(lib.ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(),
                                        _TYPES[input.dtype], _op(op, input), h, None), h)

        return self._submit(run, [output])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        n = self.size()
        for i, (out, ins) in enumerate(zip(output_tensors, input_tensors)):
            _type(out, "output_tensors[%d]" % i)
            _op(op, out)
            if len(ins) != n or any(x.numel() != out.numel() or x.dtype != out.dtype for x in ins):
                raise InvalidArgumentError(
                    4, "input_tensors[%d] must be %d tensors like output_tensors[%d]" % (i, n, i))
        h = self._h()

        def run():
            for out, ins in zip(output_tensors, input_tensors):
                flat = torch.cat([x.reshape(-1) for x in ins])
                check(lib.ncclReduceScatter(flat.data_ptr(), out.data_ptr(), out.numel(),
                                            _TYPES[out.dtype], _op(op, out), h, None), h)

        return self._submit(run, output_tensors)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        _type(input, "input")
        _type(output, "output")
        n = self.size()
        if output.dtype != input.dtype:
            raise InvalidArgumentError(4, "output is %s but input is %s" % (output.dtype, input.dtype))
        row_in = input[0].numel() if input.dim() > 0 and input.shape[0] else 0
        row_out = output[0].numel() if output.dim() > 0 and output.shape[0] else 0
        if not output_split_sizes and not input_split_sizes:
            if input.numel() % n or input.numel() != output.numel():
                raise InvalidArgumentError(
                    4, "equal splits need input and output of one size, a multiple of %d" % n)
            h = self._h()

            def run():
                check(lib.ncclAlltoAll(input.data_ptr(), output.data_ptr(), input.numel() // n,
                                       _TYPES[input.dtype], h, None), h)

            return self._submit(run, [output])
        ins = list(input_split_sizes) or [input.shape[0] // n] * n
        outs = list(output_split_sizes) or [output.shape[0] // n] * n
        if len(ins) != n or len(outs) != n or sum(ins) * row_in != input.numel() or \
                sum(outs) * row_out != output.numel():
            raise InvalidArgumentError(4, "split sizes do not match the tensors and %d ranks" % n)
        esize = input.element_size()
        h = self._h()

        def run():
            check(lib.ncclGroupStart())
            try:
                off_in = off_out = 0
                for p in range(n):
                    check(lib.ncclSend(input.data_ptr() + off_in * row_in * esize, ins[p] * row_in,
                                       _TYPES[input.dtype], p, h, None), h)
                    check(lib.ncclRecv(output.data_ptr() + off_out * row_out * esize,
                                       outs[p] * row_out, _TYPES[output.dtype], p, h, None), h)
                    off_in += ins[p]
                    off_out += outs[p]
            finally:
                check(lib.ncclGroupEnd(), h)

        return self._submit(run, [output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        n = self.size()
        if len(output_tensors) != n or len(input_tensors) != n:
            raise InvalidArgumentError(4, "alltoall takes %d input and %d output tensors" % (n, n))
        for i in range(n):
            _type(input_tensors[i], "input_tensors[%d]" % i)
            _type(output_tensors[i], "output_tensors[%d]" % i)
        h = self._h()

        def run():
            check(lib.ncclGroupStart())
            try:
                for p in range(n):
                    x, y = input_tensors[p], output_tensors[p]
                    check(lib.ncclSend(x.data_ptr(), x.numel(), _TYPES[x.dtype], p, h, None), h)
                    check(lib.ncclRecv(y.data_ptr(), y.numel(), _TYPES[y.dtype], p, h, None), h)
            finally:
                check(lib.ncclGroupEnd(), h)

        return self._submit(run, output_tensors)

    def gather(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        inp = input_tensors[0]
        _type(inp, "input_tensors[0]")
        me, n = self.rank(), self.size()
        if me == root and (len(output_tensors) != 1 or len(output_tensors[0]) != n):
            raise InvalidArgumentError(4, "on the root, output_tensors must be [[%d tensors]]" % n)
        h = self._h()

        def run():
            flat = torch.empty(n * inp.numel(), dtype=inp.dtype) if me == root else None
            check(lib.ncclGather(inp.data_ptr(), flat.data_ptr() if flat is not None else None,
                                 inp.numel(), _TYPES[inp.dtype], root, h, None), h)
            if flat is not None:
                for r, o in enumerate(output_tensors[0]):
                    o.copy_(flat[r * inp.numel():(r + 1) * inp.numel()].view_as(o))

        return self._submit(run, output_tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        out = output_tensors[0]
        _type(out, "output_tensors[0]")
        me, n = self.rank(), self.size()
        if me == root and (len(input_tensors) != 1 or len(input_tensors[0]) != n):
            raise InvalidArgumentError(4, "on the root, input_tensors must be [[%d tensors]]" % n)
        h = self._h()

        def run():
            flat = torch.cat([x.reshape(-1) for x in input_tensors[0]]) if me == root else None
            check(lib.ncclScatter(flat.data_ptr() if flat is not None else None, out.data_ptr(),
                                  out.numel(), _TYPES[out.dtype], root, h, None), h)

        return self._submit(run, output_tensors)

    def barrier(self, opts=None):
        one = torch.zeros(1, dtype=torch.int32)
        h = self._h()

        def run():
            check(lib.ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, 2, 0, h, None), h)

        return self._submit(run, [one])

    def send(self, tensors, dst, tag=0):
        t = tensors[0]
        _type(t, "tensor")
        h = self._h()

        def run():
            check(lib.ncclSend(t.data_ptr(), t.numel(), _TYPES[t.dtype], dst, h, None), h)

        return self._submit(run, tensors, p2p=True)

    def recv(self, tensors, src, tag=0):
        t = tensors[0]
        _type(t, "tensor")
        h = self._h()

        def run():
            check(lib.ncclRecv(t.data_ptr(), t.numel(), _TYPES[t.dtype], src, h, None), h)

        return self._submit(run, tensors, p2p=True)

    def recv_anysource(self, tensors, tag=0):
        raise _lib.InvalidUsageError(5, "recv from any source is not supported by the chorus backend")

    def shutdown(self):
        """Finishes the queued work, stops the worker and frees the communicator."""
        if self._worker.is_alive():
            self._queue.put(None)
            self._worker.join()
        self._comm.destroy()
        _live.discard(self)


# Process groups still alive at exit stop their workers first: the interpreter would otherwise
# end the daemon threads in the middle of torch calls.
_live = weakref.WeakSet()


@atexit.register
def _shutdown_all():
    for pg in list(_live):
        try:
            pg.shutdown()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def _create(store, rank, size, timeout):
    return ProcessGroupChorus(store, rank, size, timeout)


if not hasattr(dist.Backend, "CHORUS"):
    dist.Backend.register_backend("chorus", _create)
