"""Loading libchorus and describing its C API to ctypes.

The library is looked for, in order: the file named by CHORUS_LIBRARY; the library of the build
or installation this package came with (_paths.py, written by meson); then the system's search
path (ctypes.util.find_library). Calls go through ctypes.CDLL, which releases the GIL for the
duration of each call, so collectives in several Python threads run at once.
"""

import ctypes
import ctypes.util
import os

NCCL_UNIQUE_ID_BYTES = 128


class UniqueIdStruct(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * NCCL_UNIQUE_ID_BYTES)]


# ncclResult_t values and the Python exception each maps to.
RESULT_NAMES = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}


class ChorusError(RuntimeError):
    """A Chorus call failed. `code` is the ncclResult_t value, `name` its name, and the message
    is the library's explanation (ncclGetLastError)."""

    def __init__(self, code, message):
        self.code = code
        self.name = RESULT_NAMES.get(code, "ncclResult %d" % code)
        super().__init__("%s: %s" % (self.name, message))


class InvalidArgumentError(ChorusError, ValueError):
    """ncclInvalidArgument: a bad argument (the message names it)."""


class InvalidUsageError(ChorusError):
    """ncclInvalidUsage: a call the communicator's state or the API's rules do not allow."""


class RemoteError(ChorusError):
    """ncclRemoteError: a peer failed or went away."""


class SystemError_(ChorusError):
    """ncclSystemError: the operating system refused something (sockets, memory, ...)."""


_EXCEPTIONS = {4: InvalidArgumentError, 5: InvalidUsageError, 6: RemoteError, 2: SystemError_}


def _candidates():
    env = os.environ.get("CHORUS_LIBRARY")
    if env:
        return [env]
    found = []
    try:
        from . import _paths  # written by meson: the build's or the installation's library

        found.append(_paths.LIBRARY)
    except ImportError:
        pass
    system = ctypes.util.find_library("chorus")
    if system:
        found.append(system)
    return found


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "chorus: libchorus.so was not found; tried: %s. Build Chorus (tools/dev.sh build) and "
        "put build/python on PYTHONPATH, install it (meson install), or set CHORUS_LIBRARY to "
        "the library's path" % ("; ".join(tried) if tried else "nothing (no candidate)")
    )


lib, LIBRARY_PATH = _load()

_p = ctypes.c_void_p
_i = ctypes.c_int
_sz = ctypes.c_size_t
_comm_p = ctypes.POINTER(ctypes.c_void_p)

_SIGNATURES = {
    "ncclGetVersion": [ctypes.POINTER(_i)],
    "ncclGetUniqueId": [ctypes.POINTER(UniqueIdStruct)],
    "chorusCommInitRankHost": [_comm_p, _i, UniqueIdStruct, _i, _p],
    "ncclCommSplit": [_p, _i, _i, _comm_p, _p],
    "ncclCommShrink": [_p, ctypes.POINTER(_i), _i, _comm_p, _p, _i],
    "ncclCommDestroy": [_p],
    "ncclCommAbort": [_p],
    "ncclCommCount": [_p, ctypes.POINTER(_i)],
    "ncclCommUserRank": [_p, ctypes.POINTER(_i)],
    "ncclCommGetAsyncError": [_p, ctypes.POINTER(_i)],
    "ncclAllReduce": [_p, _p, _sz, _i, _i, _p, _p],
    "ncclBroadcast": [_p, _p, _sz, _i, _i, _p, _p],
    "ncclReduce": [_p, _p, _sz, _i, _i, _i, _p, _p],
    "ncclAllGather": [_p, _p, _sz, _i, _p, _p],
    "ncclReduceScatter": [_p, _p, _sz, _i, _i, _p, _p],
    "ncclAlltoAll": [_p, _p, _sz, _i, _p, _p],
    "ncclGather": [_p, _p, _sz, _i, _i, _p, _p],
    "ncclScatter": [_p, _p, _sz, _i, _i, _p, _p],
    "ncclSend": [_p, _sz, _i, _i, _p, _p],
    "ncclRecv": [_p, _sz, _i, _i, _p, _p],
    "ncclGroupStart": [],
    "ncclGroupEnd": [],
    "ncclRedOpCreatePreMulSum": [ctypes.POINTER(_i), _p, _i, _i, _p],
    "ncclRedOpDestroy": [_i, _p],
}

for _name, _args in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.argtypes = _args
    _fn.restype = _i

lib.ncclGetLastError.argtypes = [_p]
lib.ncclGetLastError.restype = ctypes.c_char_p
lib.ncclGetErrorString.argtypes = [_i]
lib.ncclGetErrorString.restype = ctypes.c_char_p
lib.chorusGetVersionString.argtypes = []
lib.chorusGetVersionString.restype = ctypes.c_char_p


def check(result, comm=None):
    """Raises the exception for a failed ncclResult_t, with the library's last error text."""
    if result == 0:
        return
    text = lib.ncclGetLastError(comm)
    message = text.decode("utf-8", "replace") if text else ""
    if not message:
        message = lib.ncclGetErrorString(result).decode("utf-8", "replace")
    raise _EXCEPTIONS.get(result, ChorusError)(result, message)
