"""python3 -m eccl.master: runs one eccl master (or, with --relay, one relay
of the coordinator's tree) until SIGINT or SIGTERM, as tools/eccl-master
does, with the same options and output: the bound address is printed as
"eccl-master listening on HOST:PORT" so that a launcher can start it on
port 0 and read back the port it got.
"""

import argparse
import signal
import sys

from . import _eccl
from ._errors import Error


def _hostport(text):
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError("wants HOST:PORT, got '%s'" % text)
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m eccl.master",
                                     description="Runs an eccl master until SIGINT or SIGTERM.")
    parser.add_argument("-l", "--listen", required=True, type=_hostport,
                        help="address to bind, HOST:PORT; PORT 0 picks a free port")
    parser.add_argument("-r", "--relay", metavar="PARENT", type=_hostport,
                        help="run a relay instead: peers connect to it as to the master, it speaks "
                             "for them to PARENT (the master or another relay, HOST:PORT)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing but errors (not even the 'listening on' line)")
    args = parser.parse_args(argv)

    # Blocked before the master exists so that its progress thread inherits
    # the mask: the signals must reach sigwait below (this thread), not a
    # thread that Python's handler would leave the main thread unaware of.
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        server = _eccl.Relay(args.listen, args.relay) if args.relay else _eccl.Master(args.listen)
    except Error as e:
        print("eccl-master: starting: %s" % e, file=sys.stderr)
        return 1
    if not args.quiet:
        print("eccl-master %slistening on %s" % ("relay " if args.relay else "", server.address), flush=True)
    signal.sigwait(stop_signals)
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
