"""eccl.Comm and eccl.SharedState: the Python-side conveniences around the
extension's communicator. Every collective is the extension's own method
(no Python frame between the caller and the C call); what is here only
shapes arguments and results.
"""

import time

from . import _eccl


class SharedState:
    """Named tensors that peers keep identical (eccl_shared_state).

    ``tensors`` maps a key (1..63 bytes, unique) to a numpy array or a
    torch tensor; a sync replaces the contents of outdated ones in place,
    so the same objects must stay alive and unresized between syncs (they
    are what the program trains with). ``unvoted`` lists keys that may differ
    between peers (allow_content_inequality: never voted on, never
    transferred). ``revision`` follows the revision rule of
    eccl_comm_sync_shared_state: a peer that took part in the last
    successful sync passes exactly that revision + 1; a newcomer passes any
    and adopts the elected one. A sync sets ``revision`` to the elected one.
    """

    def __init__(self, tensors=None, revision=0, unvoted=()):
        self.tensors = dict(tensors or {})
        self.revision = int(revision)
        self.unvoted = set(unvoted)
        unknown = self.unvoted - set(self.tensors)
        if unknown:
            raise ValueError("SharedState: unvoted keys %s are not among the tensors" % sorted(unknown))

    def __repr__(self):
        return "SharedState(revision=%d, keys=%s, unvoted=%s)" % (
            self.revision, sorted(self.tensors), sorted(self.unvoted))


class Comm(_eccl.Comm):
    """A communicator: one peer of an eccl run (eccl_comm).

    ``Comm(master_addr, *, p2p_host=None, peer_group=None, p2p_pool_size=None,
    connect_timeout_ms=None, op_timeout_ms=None, peer_timeout_ms=None)``:
    the eccl_comm_params fields by name; None keeps the C library's default
    (eccl_comm_params_init). Creating it contacts nobody; ``connect()``
    registers with the master and returns once the accepted peers voted this
    one in. As a context manager it connects on entry (unless already
    connected) and closes on exit.

    ``close()`` is eccl_comm_destroy: alone, it leaves an elastic run (the
    others go on, on a new ring). A run that ends as a whole calls
    ``leave()`` on every peer first. Ops still in flight at close() fail
    with eccl.Closed.

    Every blocking method releases the GIL for the C call and is bounded by
    the communicator's timeouts (op_timeout_ms, connect_timeout_ms).
    """

    def __enter__(self):
        if not self.connected:
            try:
                self.connect()
            except BaseException:
                self.close()
                raise
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    def __repr__(self):
        if self.closed:
            return "<eccl.Comm %s closed>" % self.master_addr
        return "<eccl.Comm %s%s>" % (self.master_addr, "" if self.connected else " not connected")

    # ---- admission ----

    def admit_pending(self):
        """One turn of the admission loop: the peers_pending vote, then, if
        any peer waits, update_topology (also a vote of every accepted peer).
        Returns how many were pending. Every accepted peer must call it at
        the same point of its loop."""
        pending = self.peers_pending()
        if pending:
            self.update_topology()
        return pending

    def admit_until(self, world, timeout_s=60.0):
        """Runs the admission loop (admit_pending) until this peer group has
        ``world`` accepted peers: how a fixed set of peers that start together
        gather before their first collective. Every accepted peer runs it.
        TimeoutError after ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while self.world_size < world:
            if time.monotonic() > end:
                raise TimeoutError("admit_until: the world stayed at %d peers, %d wanted, for %.0f s"
                                   % (self.world_size, world, timeout_s))
            if not self.admit_pending():
                time.sleep(0.005)  # nobody pending yet: the vote is a master round trip

    # ---- attributes (ECCL_ATTR_*) ----
    # RANK, WORLD_SIZE, EPOCH and HOST_RANKS are those of the ring the next
    # call runs on: read during a membership change, they wait for the new
    # ring (at most op_timeout_ms). Reading RANK, WORLD_SIZE or EPOCH also
    # tells the library which numbering send/recv peers are named in.

    @property
    def rank(self):
        return self.get_attr(_eccl.Attr.RANK)

    @property
    def world_size(self):
        return self.get_attr(_eccl.Attr.WORLD_SIZE)

    @property
    def peer_id(self):
        return self.get_attr(_eccl.Attr.PEER_ID)

    @property
    def epoch(self):
        return self.get_attr(_eccl.Attr.EPOCH)

    @property
    def slow_peer(self):
        """The peer id of a member that calls late, as the master names it
        (every collective waits for it: docs/trace.md, "Slow ranks while the
        job runs"); 0: none."""
        return self.get_attr(_eccl.Attr.SLOW_PEER)

    @property
    def slow_link(self):
        """The link of this group the master names slow, as (from peer id,
        to peer id), far under the median rate of the group's links
        (docs/trace.md, "Slow links while the job runs"); None: none."""
        frm = self.get_attr(_eccl.Attr.SLOW_LINK_FROM)
        return (frm, self.get_attr(_eccl.Attr.SLOW_LINK_TO)) if frm else None

    @property
    def p2p_pool_size(self):
        return self.get_attr(_eccl.Attr.P2P_POOL)

    @property
    def ring_links(self):
        return self.get_attr(_eccl.Attr.RING_LINKS)

    @property
    def host_ranks(self):
        return self.get_attr(_eccl.Attr.HOST_RANKS)

    # ---- shared state ----

    def sync_shared_state(self, state, *, strategy=_eccl.SyncStrategy.ENFORCE_POPULAR,
                          hash=_eccl.HashType.SIMPLE):  # noqa: A002 (the C parameter's name)
        """eccl_comm_sync_shared_state on an eccl.SharedState: every accepted
        peer of the group calls it; outdated tensors are fetched straight into
        their arrays. Sets state.revision to the elected revision and returns
        the SyncInfo."""
        if not isinstance(state, SharedState):
            raise TypeError("sync_shared_state: state must be an eccl.SharedState, not %s"
                            % type(state).__name__)
        keys = list(state.tensors)
        bufs = [state.tensors[k] for k in keys]
        unvoted = [k in state.unvoted for k in keys]
        info, revision = self._sync_shared_state(keys, bufs, unvoted, state.revision, strategy, hash)
        state.revision = revision
        return info
