"""Chorus from Python: collectives and send/recv on numpy arrays over the NCCL C API of
libchorus (host memory; ctypes, no compiled extension).

    import numpy as np, chorus
    with chorus.Communicator.from_env() as comm:     # under chorusrun, torchrun, mpirun, srun
        grad = np.ones(1 << 20, dtype=np.float32)
        comm.all_reduce(grad, grad, op="avg")        # in place

`import chorus.torch` registers the torch.distributed backend "chorus".
"""

from ._lib import (ChorusError, InvalidArgumentError, InvalidUsageError, LIBRARY_PATH,
                   RemoteError)
from ._comm import (DTYPES, OPS, Communicator, PreMulSum, UniqueId, group, init_all, version)

__all__ = [
    "ChorusError", "InvalidArgumentError", "InvalidUsageError", "RemoteError", "LIBRARY_PATH",
    "DTYPES", "OPS", "Communicator", "PreMulSum", "UniqueId", "group", "init_all", "version",
]
