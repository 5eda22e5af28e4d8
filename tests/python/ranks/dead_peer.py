"""Rank 1 leaves right after init; rank 0's next collective must fail with a clear error."""
import os
import time

import numpy as np

import chorus

c = chorus.Communicator.from_env()
if c.rank == 1:
    os._exit(0)
start = time.monotonic()
try:
    c.all_reduce(np.ones(1 << 20, np.float32))
    print("NO ERROR", flush=True)
except chorus.ChorusError as e:
    print("ERROR %.1f s %s %s" % (time.monotonic() - start, e.name, e), flush=True)
    c.abort()
