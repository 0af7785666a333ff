"""One exception class per ECCL_ERR_* code, all deriving from eccl.Error.

The names are the C names in CamelCase (ECCL_ERR_PEER_LOST -> PeerLost).
Where a Python built-in exception means the same thing, the class derives
from it too, so that generic handlers catch it: InvalidArg is a ValueError,
NoMemory a MemoryError, Timeout a TimeoutError, Connect a ConnectionError.

Every instance carries:
  code  -- the eccl_result (an int; eccl.Result names it)
  call  -- the Python method that failed ("all_reduce", "connect", ...)
  info  -- what the C call reported about itself, where it reports anything:
           a ReduceInfo (collectives), a SyncInfo, a TopoInfo, a list of
           ReduceInfo (all_reduce_multiple_with_retry), else None
"""

from . import _eccl


class Error(Exception):
    """An eccl call failed; the subclass says how (one per ECCL_ERR_* code)."""

    #: the eccl_result code of the class (instances: of the failure)
    code = -1
    #: the C name, e.g. "ECCL_ERR_PEER_LOST"
    c_name = ""

    # Set by _from_code; a plain Error(...) raised by user code has none.
    call = None
    info = None


def _make(c_name, base_doc, *bases):
    suffix = c_name[len("ECCL_ERR_"):]
    name = "".join(part.capitalize() for part in suffix.split("_"))
    code = int(getattr(_eccl.Result, suffix))
    cls = type(name, (Error,) + bases, {"code": code, "c_name": c_name, "__doc__": base_doc,
                                         "__module__": "eccl"})
    return cls


InvalidArg = _make("ECCL_ERR_INVALID_ARG", "A NULL or out-of-range argument (also a ValueError).", ValueError)
NoMemory = _make("ECCL_ERR_NO_MEMORY", "An allocation failed (also a MemoryError).", MemoryError)
System = _make("ECCL_ERR_SYSTEM", "The operating system refused (see the log).")
Connect = _make("ECCL_ERR_CONNECT", "Could not reach the master or a peer (also a ConnectionError).",
                ConnectionError)
Timeout = _make("ECCL_ERR_TIMEOUT", "The configured timeout passed (also a TimeoutError).", TimeoutError)
PeerLost = _make("ECCL_ERR_PEER_LOST",
                 "A peer left mid-operation; every output buffer holds what it held before the call. "
                 "Calling again runs on the survivors.")
TooFewPeers = _make("ECCL_ERR_TOO_FEW_PEERS", "A collective needs at least two peers.")
Protocol = _make("ECCL_ERR_PROTOCOL", "A malformed or unexpected frame.")
Kicked = _make("ECCL_ERR_KICKED", "The master removed this peer.")
MasterLost = _make("ECCL_ERR_MASTER_LOST", "The connection to the master broke.")
Busy = _make("ECCL_ERR_BUSY", "The tag is already in flight, or the call does not fit the current state.")
NotConnected = _make("ECCL_ERR_NOT_CONNECTED", "Comm.connect() has not succeeded.")
Again = _make("ECCL_ERR_AGAIN", "Internal (would block); never returned by the C API.")
Closed = _make("ECCL_ERR_CLOSED", "The communicator (or the op's communicator) is closed or closing.")
Unsupported = _make("ECCL_ERR_UNSUPPORTED", "Not supported by this build or backend.")
Device = _make("ECCL_ERR_DEVICE", "The device (CUDA) failed a copy or kernel.")
Auth = _make("ECCL_ERR_AUTH", "A peer did not prove the job's secret, or no secret is set (ECCL_AUTH_SECRET_FILE).")

#: code -> class, for every ECCL_ERR_* code
ERRORS = {cls.code: cls for cls in (InvalidArg, NoMemory, System, Connect, Timeout, PeerLost, TooFewPeers,
                                    Protocol, Kicked, MasterLost, Busy, NotConnected, Again, Closed,
                                    Unsupported, Device, Auth)}

__all__ = ["Error", "ERRORS", "error_class"] + [cls.__name__ for cls in ERRORS.values()]


def error_class(code):
    """The exception class of an eccl_result code (Error for an unknown one)."""
    return ERRORS.get(int(code), Error)


def _from_code(code, call, info):
    """Called by the extension for every failed C call: the instance to raise."""
    cls = error_class(code)
    name = cls.c_name or "eccl_result %d" % code
    # One message argument only: the OSError-derived classes (Timeout,
    # Connect) would read several arguments as (errno, strerror, ...).
    exc = cls("%s: %s (%s)" % (call, _eccl.strerror(code), name))
    exc.code = int(code)
    exc.call = call
    exc.info = info
    return exc


_eccl._set_error_factory(_from_code)
