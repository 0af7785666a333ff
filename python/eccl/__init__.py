"""eccl: elastic, fault-tolerant collective communication, from Python.

A thin layer over libeccl (include/eccl.h is the contract): ``eccl.Comm`` is a
peer, ``eccl.Master`` the coordinator. Collectives take numpy arrays and
torch tensors (CPU, or CUDA where torch has it) and hand their memory to the
C library without a copy. Every ECCL_ERR_* code is an exception class
deriving from ``eccl.Error`` (``eccl.PeerLost``, ``eccl.TooFewPeers``, ...);
arguments that cannot be right (dtypes that differ, non-contiguous arrays,
sizes that do not fit the layout) raise TypeError or ValueError before
anything is sent. Blocking calls release the GIL.

    import numpy as np, eccl
    with eccl.Comm("127.0.0.1:5000") as comm:       # connect ... close
        grads = np.ones(1024, np.float32)
        comm.all_reduce(grads, op=eccl.AVG)          # in place

See docs/python.md. Room is left for framework integrations as
subpackages (``eccl.torch``), which build on this API.
"""

from . import _eccl
from ._eccl import (Algorithm, Attr, Dtype, HashType, Master, Op, Quant, ReduceInfo, Relay, Request,
                    Result, SyncInfo, SyncStrategy, TopoInfo, buffer_dtype, dtype_name, dtype_size,
                    strerror)
from ._eccl import SUM, AVG, PROD, MIN, MAX  # noqa: F401  (Op values)
from ._errors import *  # noqa: F401,F403  (Error and one class per ECCL_ERR_* code)
from ._errors import ERRORS, Error, error_class
from ._comm import Comm, SharedState

__version__ = "%d.%d.%d" % _eccl.VERSION

__all__ = ["Comm", "SharedState", "Master", "Relay", "Request", "ReduceInfo", "SyncInfo", "TopoInfo",
           "Algorithm", "Attr", "Dtype", "HashType", "Op", "Quant", "Result", "SyncStrategy",
           "SUM", "AVG", "PROD", "MIN", "MAX", "buffer_dtype", "dtype_name", "dtype_size", "strerror",
           "Error", "ERRORS", "error_class"] + [cls.__name__ for cls in ERRORS.values()]
