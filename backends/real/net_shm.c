/* The real backend's transport for host-mates: net_tcp carries core's frames,
 * and a payload of at least ECCL_SHM_MIN_BYTES between two processes of one
 * machine moves with one copy, the receiver reading it straight out of the
 * sender's buffer (cross-memory attach: process_vm_readv), instead of two
 * kernel copies through TCP loopback (docs/transports.md, "net_shm").
 *
 * It fills the bulk half of the net contract (core/env.h) as net_ibv does:
 *  - the sender's isend tells the receiver where its bytes are, in a
 *    request-to-send (RTS) on the conn's control socket: a connected pair of
 *    abstract unix datagram sockets, whose fd sits in net_tcp's epoll set;
 *  - the receiver's irecv, once it has the RTS, reads the bytes into their
 *    destination, then checks that the sender still held its buffer when the
 *    read ended (the sender's live word for that message, read the same
 *    way), and answers FIN: the sender's isend is done;
 *  - the receiver writes nothing into the sender and the sender nothing into
 *    the receiver: no stale write can land in a buffer whose call returned,
 *    and a sender that let go of a buffer (its link closed: the call failed)
 *    clears the live word first, so a read that overlapped it is refused.
 *
 * Device memory (the device-resident ring's slices, isend_device) goes the
 * same way with the allocation's CUDA IPC handle in the RTS: the receiver
 * maps it (kept per conn, closed with it), copies out of it, then checks the
 * live word. A receiver says in its FINs that it can map device memory, once
 * its own CUDA is open.
 *
 * Set-up: a listener advertises "shm:HOST:PORT". A connector whose own
 * listener has the same HOST writes a hello first (its pid, a probe word and
 * where it lives, its control socket's name); the acceptor reads the peer's
 * probe word through cross-memory attach, connects its control socket, and
 * answers with its own hello and whether it managed; the connector does the
 * same and answers with a 4-byte ack. Bulk goes through memory only when
 * both managed; otherwise the conn is plain TCP (other PID namespace,
 * ptrace rules, seccomp). Any other connection is plain TCP from the start,
 * and an acceptor whose first 4 bytes are not the hello's magic replays them
 * to core, so peers with and without shared memory mix.
 */
#include "net_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <fiu-local.h>

#include "../cuda/plugin.h"
#include "dev_cuda.h"
#include "env_real.h"
#include "net_tcp.h"
#include "util/addr.h"
#include "util/config.h"
#include "util/log.h"

#define HELLO_MAGIC "ESHM"
#define HELLO_VERSION 3
/* Messages in flight per conn and direction. Each control socket then
 * holds at most SLOTS RTS and SLOTS FIN unread, within Linux's default
 * queue of 10 datagrams (net.unix.max_dgram_qlen), so a control send never
 * finds the queue full. */
#define SLOTS 4
#define DEFAULT_MIN_BYTES (256u << 10)
#define DEFAULT_RING_BYTES (512u << 10)
#define RING_MAX_BYTES (64u << 20)
#define CTL_NAME_MAX 20

/* What each side writes first on a conn between host-mates (host order:
 * both ends are one machine). */
typedef struct hello {
    char magic[4];
    uint32_t version;
    uint32_t pid;
    uint32_t ok;          /* the acceptor's: it read our probe and reached our socket */
    uint64_t probe_addr;  /* where `probe` lives in the writer */
    uint64_t probe;
    uint64_t live_addr;   /* the writer's live words (SLOTS of them) */
    uint32_t ctl_len;     /* its control socket's abstract name, length */
    char ctl[CTL_NAME_MAX];
    uint32_t inbox_fd;    /* the writer's inbox (a sealed memfd), as its fd there */
    uint32_t inbox_bytes; /* its ring's size; 0: frames stay in the TCP stream */
    uint32_t wake_fd;     /* the eventfd that wakes the writer's wait, as its fd there */
    uint32_t pad;
} hello;
_Static_assert(sizeof(hello) == 80, "the hello is 80 bytes on the wire");

/* A conn's inbox: a ring that the peer writes core's bytes into and its
 * owner reads, in a memfd both map. Counters only grow; each side writes
 * one of them. The flags make a side that is about to block be woken: the
 * other rings a bell, a write to the eventfd its wait sleeps on (the
 * doorbell, taken from it at set-up) or, where that could not be taken, a
 * byte on the TCP stream. The stream carries nothing else then, and still
 * tells a closed or dead peer as before. */
typedef struct inbox {
    _Atomic uint64_t head; /* bytes the writer put in, ever */
    uint8_t pad0[56];
    _Atomic uint64_t tail; /* bytes the reader took out, ever */
    uint8_t pad1[56];
    _Atomic uint32_t reader_sleeps; /* a reader thread is about to block in wait: the writer rings */
    _Atomic uint32_t writer_waits;  /* the writer found no room: the reader rings */
} inbox;
#define INBOX_HDR 4096u
_Static_assert(sizeof(inbox) <= INBOX_HDR, "the header fits its page");

enum { CTL_RTS = 1, CTL_FIN = 2 };
enum {
    CTL_DEVICE = 1,    /* RTS: device memory; `ipc` names its allocation, `addr` is the offset in it */
    CTL_CAN_IMPORT = 1 /* FIN: the receiver maps device memory (CUDA IPC) */
};

/* One datagram on the control socket. */
typedef struct ctl_msg {
    uint32_t type;
    uint32_t flags;
    uint64_t seq;
    uint64_t addr; /* RTS: the sender's buffer */
    uint64_t len;
    uint8_t ipc[ECCL_CUDA_IPC_HANDLE_BYTES];
} ctl_msg;

/* A host-mate's device allocations mapped here, per conn (most recently
 * used kept; all closed with the conn). */
#define IMPORTS 4

typedef struct import {
    uint8_t handle[ECCL_CUDA_IPC_HANDLE_BYTES];
    uint8_t *base; /* NULL: a free entry */
    int device;
    uint64_t used;
} import;

enum conn_mode { MODE_PLAIN, MODE_HELLO, MODE_READY };

typedef struct shm_net {
    eccl_env *env;
    eccl_real_cuda *cuda;    /* device payloads through CUDA IPC (ECCL_SHM_IPC); NULL: none */
    void *tcp;               /* the stream net */
    size_t min_bytes;
    size_t host_bulk_bytes;  /* ECCL_SHM_HOST_BULK_BYTES; 0: host payloads through inboxes */
    size_t ring_bytes;       /* our inboxes' size (ECCL_SHM_RING_BYTES); 0: none */
    /* conns whose frames go through inboxes, for `wait` to look into; a
     * conn leaves under the mutex before it is freed */
    pthread_mutex_t mu;
    eccl_conn **rings;
    size_t nrings, cap_rings;
    int sleepers; /* our threads about to block in `wait` (mu) */
    _Atomic uint64_t sockets_at; /* when a polling `wait` last looked at the sockets */
    atomic_int prompt;           /* conns whose news the sockets carry (conn_apply_interest) */
    char host[ECCL_ADDR_MAX]; /* our listener's HOST; "" before the first listen */
    uint64_t probes;         /* makes each conn's probe word differ */
} shm_net;

struct eccl_bulk {
    eccl_bulk *next; /* the conn's sends or receives, in seq order; or spare */
    eccl_conn *c;
    int is_send;
    int done;
    uint64_t seq;
    uint8_t *buf;
    size_t len;
    int device;   /* a send of device memory: its device, else -1 */
    size_t off;   /* ...its offset in the allocation `ipc` names */
    uint8_t ipc[ECCL_CUDA_IPC_HANDLE_BYTES];
};

struct eccl_conn {
    shm_net *n;
    eccl_conn *s; /* the TCP stream */
    void *user;
    int mode;
    int acceptor;
    int shm;      /* bulk through memory: both hellos said so */
    _Atomic int want_read, want_write; /* core's; `wait` reads them without a lock */
    atomic_int prompt; /* counted in n->prompt */
    eccl_result err;
    char addr[ECCL_ADDR_MAX];
    /* set-up */
    hello out, in;
    size_t out_sent, in_got;
    int out_built;
    uint32_t ack_out, ack_in;
    size_t ack_sent, ack_got;
    size_t prefix_len, prefix_pos; /* a plain peer's first bytes, kept in `in` */
    uint64_t probe;
    int ctl;       /* the control socket, -1 when none */
    int watching;
    pid_t peer;
    /* sends: the peer reads live[seq % SLOTS] == seq + 1 while we hold
     * message seq's buffer for it */
    _Atomic uint64_t live[SLOTS];
    eccl_bulk *tx_head, *tx_tail;
    uint64_t tx_seq; /* the next isend */
    uint64_t tx_rts; /* the next isend whose RTS has not gone */
    uint64_t tx_fin; /* the next isend the peer has not finished */
    /* receives */
    ctl_msg rts[SLOTS];
    uint64_t rts_got; /* RTS received */
    eccl_bulk *rx_head, *rx_tail;
    uint64_t rx_seq;  /* the next irecv */
    uint64_t rx_done; /* the next irecv not read yet */
    eccl_bulk *spare;
    /* device memory: the peer maps ours (its last FIN said so); the
     * peer's we mapped */
    int peer_imports;
    import imp[IMPORTS];
    uint64_t imp_clock;
    /* frames through memory: our inbox (the peer writes it) and the
     * peer's (we write it); `ring` once both hellos offered and mapped */
    int ring;
    int ibox_fd; /* our inbox's memfd until the peer mapped it; -1 after */
    inbox *ibox, *obox;
    size_t ibox_bytes, obox_bytes;
    int doorbell; /* our copy of the peer's wake-up eventfd; -1: bells on the stream */
};

struct eccl_listener {
    eccl_listener *s;
};

#define LOG(n, level, ...) ECCL_LOG((n)->env, (level), __VA_ARGS__)

__attribute__((format(printf, 3, 4))) static void conn_break(eccl_conn *c, eccl_result why, const char *fmt, ...)
{
    if (c->err != ECCL_OK) return;
    c->err = why;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    LOG(c->n, ECCL_LOG_WARN, "shared-memory link to %s lost: %s", c->addr, what);
}

/* ---- memory of the peer ------------------------------------------------------- */

/* Reads the peer's word at `from`; 0 when it came. */
static int peer_read_word(const eccl_conn *c, uint64_t *to, uint64_t from)
{
    struct iovec local = {to, sizeof *to}, remote = {(void *)(uintptr_t)from, sizeof *to};
    return process_vm_readv(c->peer, &local, 1, &remote, 1, 0) == (ssize_t)sizeof *to ? 0 : -1;
}

/* ---- inboxes: core's frames through memory ---------------------------------------- */

static uint8_t *box_data(inbox *b) { return (uint8_t *)b + INBOX_HDR; }

/* k bytes at ring position pos (counters grow; cap a power of two), in
 * two parts where they wrap. */
static void box_put(inbox *b, size_t cap, uint64_t pos, const uint8_t *src, size_t k)
{
    size_t off = (size_t)(pos & (cap - 1)), first = cap - off < k ? cap - off : k;
    memcpy(box_data(b) + off, src, first);
    memcpy(box_data(b), src + first, k - first);
}

static void box_get(inbox *b, size_t cap, uint64_t pos, uint8_t *dst, size_t k)
{
    size_t off = (size_t)(pos & (cap - 1)), first = cap - off < k ? cap - off : k;
    memcpy(dst, box_data(b) + off, first);
    memcpy(dst + first, box_data(b), k - first);
}

/* Our inbox, which the hello offers; none when rings are off or the system
 * refuses a sealed memfd. Both mappings (ours, the peer's in obox_map) are
 * populated at set-up: left to fill page by page, a ring's first laps cost
 * a page fault per 4 KiB on each side, and the first calls over a new conn
 * paid them (N = 8 all-to-alls of 32-64 KiB, 30 calls: 357-643 us a call
 * against 196-300 populated). The price: the ring's memory from the start,
 * which any conn that carries its size in traffic takes anyway. */
static void ibox_create(eccl_conn *c)
{
    size_t bytes = c->n->ring_bytes;
    if (!bytes) return;
    int fd = memfd_create("eccl-shm-inbox", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)(INBOX_HDR + bytes)) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        p = mmap(NULL, INBOX_HDR + bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return;
    }
    c->ibox = p;
    c->ibox_fd = fd;
    c->ibox_bytes = bytes;
}

/* The peer's inbox, which its hello names: opened through /proc (a weaker
 * ptrace rule than the probe's), and mapped only if sealed against
 * shrinking (else the peer could make our writes fault). 0 when mapped or
 * when either side offers none; -1 when it cannot be. */
static int obox_map(eccl_conn *c)
{
    size_t bytes = c->in.inbox_bytes;
    if (!c->ibox || !bytes) return 0;
    int fail = 0;
    fiu_do_on("eccl/net_shm/inbox", fail = 1);
    if (fail || bytes > RING_MAX_BYTES || bytes < 4096 || (bytes & (bytes - 1))) {
        errno = EPROTO;
        return -1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/fd/%u", (unsigned)c->in.pid, (unsigned)c->in.inbox_fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == INBOX_HDR + bytes && seals >= 0 && (seals & F_SEAL_SHRINK))
        p = mmap(NULL, INBOX_HDR + bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    else
        errno = EPROTO;
    close(fd);
    if (p == MAP_FAILED) return -1;
    c->obox = p;
    c->obox_bytes = bytes;
    return 0;
}

/* The peer's wake-up eventfd (its net_tcp's), copied out of its process
 * (pidfd_getfd: the ptrace rule of the probe's read): a bell is then one
 * 8-byte write that wakes the peer's wait, where a byte on the stream went
 * through both halves of the loopback TCP stack and its ACK (sending bells
 * was 40 % of all CPU time at 8 ranks of small all-gathers on two cores).
 * Where it cannot be copied, or is not an eventfd, bells stay on the
 * stream. */
static void doorbell_take(eccl_conn *c)
{
    int fail = 0;
    fiu_do_on("eccl/net_shm/doorbell", fail = 1);
    if (fail) return;
    int pidfd = pidfd_open(c->peer, 0);
    if (pidfd < 0) return;
    int fd = pidfd_getfd(pidfd, (int)c->in.wake_fd, 0); /* close-on-exec */
    close(pidfd);
    if (fd < 0) return;
    char path[40], what[32];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(path, what, sizeof what - 1);
    if (k <= 0 || (what[k] = 0, strcmp(what, "anon_inode:[eventfd]") != 0)) {
        close(fd);
        return;
    }
    c->doorbell = fd;
}

static void boxes_release(eccl_conn *c)
{
    if (c->doorbell >= 0) close(c->doorbell);
    c->doorbell = -1;
    if (c->ibox) munmap(c->ibox, INBOX_HDR + c->ibox_bytes);
    if (c->obox) munmap(c->obox, INBOX_HDR + c->obox_bytes);
    if (c->ibox_fd >= 0) close(c->ibox_fd);
    c->ibox = c->obox = NULL;
    c->ibox_fd = -1;
}

static int rings_add(shm_net *n, eccl_conn *c)
{
    pthread_mutex_lock(&n->mu);
    if (n->nrings == n->cap_rings) {
        size_t cap = n->cap_rings ? 2 * n->cap_rings : 16;
        eccl_conn **v = realloc(n->rings, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&n->mu);
            return -1;
        }
        n->rings = v;
        n->cap_rings = cap;
    }
    n->rings[n->nrings++] = c;
    atomic_store_explicit(&c->ibox->reader_sleeps, n->sleepers > 0, memory_order_seq_cst);
    pthread_mutex_unlock(&n->mu);
    return 0;
}

static void rings_remove(shm_net *n, eccl_conn *c)
{
    pthread_mutex_lock(&n->mu);
    for (size_t i = 0; i < n->nrings; i++)
        if (n->rings[i] == c) {
            n->rings[i] = n->rings[--n->nrings];
            break;
        }
    pthread_mutex_unlock(&n->mu);
}

/* Room in the peer's inbox, as far as we can tell. */
static size_t obox_room(const eccl_conn *c)
{
    uint64_t head = atomic_load_explicit(&c->obox->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&c->obox->tail, memory_order_acquire);
    return head - tail <= c->obox_bytes ? c->obox_bytes - (size_t)(head - tail) : 0;
}

static int ibox_has_bytes(const eccl_conn *c)
{
    return atomic_load_explicit(&c->ibox->head, memory_order_acquire) !=
           atomic_load_explicit(&c->ibox->tail, memory_order_relaxed);
}

#define BELL 0xb1

/* Wakes the peer: its doorbell, else one byte on the stream. A saturated
 * eventfd or a full socket buffer holds a bell already, so one not taken
 * is not missed. The socket directly: bells are not core's sends, and the
 * stream's failpoints (eccl/net/send, .../recv) count core's, in ring_send
 * and ring_recv. A peer that died is told by the stream's end, read by
 * ring_recv and ring_send, whichever way the bells go. */
static eccl_result bell(eccl_conn *c)
{
    static const uint8_t b = BELL;
    ssize_t w;
    if (c->doorbell >= 0) {
        static const uint64_t one = 1;
        do {
            w = write(c->doorbell, &one, sizeof one);
        } while (w < 0 && errno == EINTR);
        return ECCL_OK;
    }
    do {
        w = send(eccl_net_tcp_conn_fd(c->s), &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        /* as net_tcp: a peer gone is core's business, said quietly */
        LOG(c->n, errno == EPIPE || errno == ECONNRESET ? ECCL_LOG_DEBUG : ECCL_LOG_WARN, "bell to %s: %s",
            c->addr, strerror(errno));
        return ECCL_ERR_CLOSED;
    }
    return ECCL_OK;
}

/* Takes the bells waiting on the stream (it carries nothing else now);
 * ECCL_ERR_CLOSED once the peer closed it or died. */
static eccl_result bells_drain(eccl_conn *c)
{
    uint8_t junk[64];
    for (;;) {
        ssize_t r;
        do {
            r = recv(eccl_net_tcp_conn_fd(c->s), junk, sizeof junk, MSG_DONTWAIT);
        } while (r < 0 && errno == EINTR);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            LOG(c->n, r == 0 || errno == ECONNRESET ? ECCL_LOG_DEBUG : ECCL_LOG_WARN, "stream from %s: %s", c->addr,
                r == 0 ? "end of stream" : strerror(errno));
            return ECCL_ERR_CLOSED;
        }
        size_t got = r > 0 ? (size_t)r : 0;
        for (size_t i = 0; i < got; i++)
            if (junk[i] != BELL) {
                conn_break(c, ECCL_ERR_PROTOCOL, "bytes on the stream of a conn whose frames go through memory");
                return c->err;
            }
        if (got < sizeof junk) return ECCL_OK;
    }
}

/* Core's bytes into the peer's inbox, as much as fits; published (head)
 * only after they are all there, so a sender killed mid-copy leaves
 * nothing half-written for the peer to read. */
static eccl_result ring_send(eccl_conn *c, const eccl_iov *iov, int n, size_t *sent)
{
    fiu_return_on("eccl/net/send", ECCL_ERR_CLOSED); /* the stream's, as net_tcp's */
    inbox *b = c->obox;
    size_t cap = c->obox_bytes, want = 0, done = 0;
    uint64_t head = atomic_load_explicit(&b->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&b->tail, memory_order_acquire);
    if (head - tail > cap) {
        conn_break(c, ECCL_ERR_PROTOCOL, "the peer's inbox counters are inconsistent");
        return c->err;
    }
    size_t room = cap - (size_t)(head - tail);
    for (int i = 0; i < n; i++) want += iov[i].len;
    for (int i = 0; i < n && room; i++) {
        size_t k = iov[i].len < room ? iov[i].len : room;
        box_put(b, cap, head + done, iov[i].base, k);
        done += k;
        room -= k;
    }
    *sent = done;
    eccl_result rc = ECCL_OK;
    if (done) {
        atomic_store_explicit(&b->head, head + done, memory_order_release);
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&b->reader_sleeps, memory_order_relaxed)) rc = bell(c);
    }
    if (rc == ECCL_OK && done < want) {
        /* Ask for a bell once there is room (`wait` also looks for room
         * before it blocks: one of the two sees the other's write). */
        atomic_store_explicit(&b->writer_waits, 1, memory_order_seq_cst);
        if (!done) rc = bells_drain(c); /* a peer that is gone */
    }
    return rc;
}

/* Core's bytes out of our inbox; when it is empty, the stream says
 * whether the peer is still there. */
static eccl_result ring_recv(eccl_conn *c, void *buf, size_t len, size_t *got)
{
    inbox *b = c->ibox;
    size_t cap = c->ibox_bytes;
    uint64_t tail = atomic_load_explicit(&b->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&b->head, memory_order_acquire);
    if (head == tail) {
        eccl_result rc = bells_drain(c);
        if (rc != ECCL_OK) return rc;
        head = atomic_load_explicit(&b->head, memory_order_acquire);
    }
    if (head - tail > cap) {
        conn_break(c, ECCL_ERR_PROTOCOL, "our inbox's counters are inconsistent");
        return c->err;
    }
    if (head != tail) {
        /* The stream's failpoints, as net_tcp's, on a receive that has
         * bytes to deliver: a bell makes core look at a conn with nothing
         * new more often than TCP readiness did, and a one-shot fault
         * must land on traffic, as it did there. */
        fiu_return_on("eccl/net/recv", ECCL_ERR_CLOSED);
        if (c->acceptor) fiu_return_on("eccl/net/recv_accepted", ECCL_ERR_CLOSED);
    }
    size_t k = (size_t)(head - tail) < len ? (size_t)(head - tail) : len;
    box_get(b, cap, tail, buf, k);
    *got = k;
    if (!k) return ECCL_OK;
    atomic_store_explicit(&b->tail, tail + k, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&b->writer_waits, memory_order_relaxed) &&
        atomic_exchange_explicit(&b->writer_waits, 0, memory_order_seq_cst))
        return bell(c);
    return ECCL_OK;
}

/* Adds the user pointers of ring conns that core may read or write now to
 * ready[count..max), once each. `sleeps` (+1, -1, 0) first counts a thread
 * of ours that is about to block, or no longer is, and tells every inbox
 * whether any is. *inboxes (if asked): whether there are any. */
static int rings_scan(shm_net *n, void **ready, int count, int max, int sleeps, int *inboxes)
{
    pthread_mutex_lock(&n->mu);
    if (inboxes) *inboxes = n->nrings > 0;
    if (sleeps) {
        n->sleepers += sleeps;
        for (size_t i = 0; i < n->nrings; i++)
            atomic_store_explicit(&n->rings[i]->ibox->reader_sleeps, n->sleepers > 0, memory_order_seq_cst);
        atomic_thread_fence(memory_order_seq_cst);
    }
    for (size_t i = 0; i < n->nrings && count < max; i++) {
        eccl_conn *c = n->rings[i];
        int rd = atomic_load_explicit(&c->want_read, memory_order_relaxed) && ibox_has_bytes(c);
        int wr = atomic_load_explicit(&c->want_write, memory_order_relaxed) && obox_room(c) > 0;
        int dup = 0;
        for (int j = 0; j < count && !dup; j++) dup = ready[j] == c->user;
        if ((rd || wr) && !dup) ready[count++] = c->user;
    }
    pthread_mutex_unlock(&n->mu);
    return count;
}

/* ---- the control socket ------------------------------------------------------- */

/* An unnamed datagram socket bound to an abstract name the kernel picks;
 * its name goes into h. -1 when the system refuses. */
static int ctl_open(hello *h)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    socklen_t len = sizeof(sa_family_t); /* autobind: a fresh abstract name */
    if (bind(fd, (struct sockaddr *)&sa, len) != 0) goto fail;
    len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) goto fail;
    size_t name = len - offsetof(struct sockaddr_un, sun_path);
    if (name < 2 || name > CTL_NAME_MAX || sa.sun_path[0] != '\0') goto fail;
    h->ctl_len = (uint32_t)name;
    memcpy(h->ctl, sa.sun_path, name);
    return fd;
fail:
    close(fd);
    return -1;
}

/* Only the peer's datagrams reach a connected datagram socket. */
static int ctl_connect(eccl_conn *c)
{
    if (c->in.ctl_len < 2 || c->in.ctl_len > CTL_NAME_MAX || c->in.ctl[0] != '\0') return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, c->in.ctl, c->in.ctl_len);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + c->in.ctl_len);
    return connect(c->ctl, (struct sockaddr *)&sa, len);
}

static void ctl_close(eccl_conn *c)
{
    if (c->ctl < 0) return;
    if (c->watching) eccl_net_tcp_unwatch_fd(c->n->tcp, c->ctl);
    c->watching = 0;
    close(c->ctl);
    c->ctl = -1;
}

static void ctl_send(eccl_conn *c, const ctl_msg *m)
{
    if (c->err != ECCL_OK) return;
    int fail = 0;
    fiu_do_on("eccl/net_shm/ctl", fail = 1);
    if (fail || send(c->ctl, m, sizeof *m, MSG_NOSIGNAL) != (ssize_t)sizeof *m)
        conn_break(c, ECCL_ERR_CLOSED, "control message: %s", fail ? "failpoint eccl/net_shm/ctl" : strerror(errno));
}

/* ---- set-up: the hellos --------------------------------------------------------- */

static void conn_apply_interest(eccl_conn *c);

static void hello_build(eccl_conn *c, uint32_t ok)
{
    memcpy(c->out.magic, HELLO_MAGIC, 4);
    c->out.version = HELLO_VERSION;
    c->out.pid = (uint32_t)getpid();
    c->out.ok = ok;
    c->out.probe_addr = (uint64_t)(uintptr_t)&c->probe;
    c->out.probe = c->probe;
    c->out.live_addr = (uint64_t)(uintptr_t)c->live;
    c->out.inbox_fd = c->ibox ? (uint32_t)c->ibox_fd : 0;
    c->out.inbox_bytes = c->ibox ? (uint32_t)c->ibox_bytes : 0;
    c->out.wake_fd = (uint32_t)eccl_net_tcp_wake_fd(c->n->tcp);
    c->out_built = 1;
}

/* Whether this peer's memory and control socket are within reach: its
 * probe word reads back, and our socket connects to its. */
static int peer_reachable(eccl_conn *c)
{
    int fail = 0;
    fiu_do_on("eccl/net_shm/probe", fail = 1);
    c->peer = (pid_t)c->in.pid;
    uint64_t word = 0;
    if (fail || c->ctl < 0 || peer_read_word(c, &word, c->in.probe_addr) != 0 ||
        word != c->in.probe || ctl_connect(c) != 0 || obox_map(c) != 0) {
        LOG(c->n, ECCL_LOG_INFO, "link to %s: no shared memory with pid %u (%s); payloads over TCP",
            c->addr, (unsigned)c->in.pid, fail ? "failpoint eccl/net_shm/probe" : strerror(errno));
        return 0;
    }
    if (c->obox) doorbell_take(c);
    return 1;
}

static int hello_valid(const hello *h)
{
    return memcmp(h->magic, HELLO_MAGIC, 4) == 0 && h->version == HELLO_VERSION && h->pid != 0 &&
           h->ok <= 1;
}

/* Both hellos and the ack went: bulk through memory if both ends reached
 * the other, else the stream is all there is. */
static eccl_result hello_finish(eccl_conn *c, int ok)
{
    c->shm = ok;
    c->mode = MODE_READY;
    if (!c->shm) {
        ctl_close(c);
        boxes_release(c);
        return ECCL_OK;
    }
    /* Frames through the inboxes when both offered one and both mapped the
     * other's (the peer has it mapped by now: it did before its hello or
     * its ack). */
    if (c->ibox && c->obox && rings_add(c->n, c) == 0) {
        c->ring = 1;
        close(c->ibox_fd);
        c->ibox_fd = -1;
    } else if (c->ibox || c->obox) {
        if (c->ibox && c->obox) {
            conn_break(c, ECCL_ERR_NO_MEMORY, "no memory to list its inbox");
            return c->err;
        }
        boxes_release(c);
    }
    /* Edge-triggered: a message nobody waits for yet (an RTS ahead of
     * its header) stays queued without waking us again and again; the
     * receive that wants it reads it (conn_progress). */
    eccl_result rc = eccl_net_tcp_watch_fd(c->n->tcp, c->ctl, c->user, 1);
    if (rc != ECCL_OK) {
        conn_break(c, ECCL_ERR_CLOSED, "cannot watch its control socket");
        return c->err;
    }
    c->watching = 1;
    LOG(c->n, ECCL_LOG_DEBUG, "link to %s: payloads of %zu bytes and up through memory (pid %u)",
        c->addr, c->n->min_bytes, (unsigned)c->peer);
    return ECCL_OK;
}

static eccl_result stream_send(eccl_conn *c, const void *p, size_t len, size_t *done, int *moved)
{
    size_t sent = 0;
    eccl_iov iov = {(const uint8_t *)p + *done, len - *done};
    eccl_result rc = eccl_net_tcp_ops.send(c->n->tcp, c->s, &iov, 1, &sent);
    *done += sent;
    *moved |= sent > 0;
    return rc;
}

static eccl_result stream_recv(eccl_conn *c, void *p, size_t want, size_t *done, int *moved)
{
    size_t got = 0;
    eccl_result rc = eccl_net_tcp_ops.recv(c->n->tcp, c->s, (uint8_t *)p + *done, want, &got);
    *done += got;
    *moved |= got > 0;
    return rc;
}

/* Moves the set-up along; ECCL_OK while in progress or done. */
static eccl_result hello_progress(eccl_conn *c)
{
    eccl_result rc = ECCL_OK;
    while (c->mode == MODE_HELLO && c->err == ECCL_OK) {
        int moved = 0;
        if (c->out_built && c->out_sent < sizeof c->out &&
            (rc = stream_send(c, &c->out, sizeof c->out, &c->out_sent, &moved)) != ECCL_OK)
            return rc;
        if (c->in_got < sizeof c->in) {
            /* An acceptor reads the magic alone first: a plain peer sends
             * its own frames, which must not be read past. */
            size_t want = c->acceptor && c->in_got < 4 ? 4 - c->in_got : sizeof c->in - c->in_got;
            if ((rc = stream_recv(c, &c->in, want, &c->in_got, &moved)) != ECCL_OK) return rc;
            if (c->acceptor && c->in_got == 4 && memcmp(c->in.magic, HELLO_MAGIC, 4) != 0) {
                c->prefix_len = 4; /* replayed to core by shm_recv */
                c->mode = MODE_PLAIN;
                break;
            }
            if (c->in_got < sizeof c->in) {
                if (!moved) break;
                continue;
            }
            if (!hello_valid(&c->in)) {
                conn_break(c, ECCL_ERR_PROTOCOL, "malformed hello");
                return c->err;
            }
            if (c->acceptor) {
                c->ctl = ctl_open(&c->out);
                ibox_create(c);
                hello_build(c, (uint32_t)peer_reachable(c));
            } else {
                c->ack_out = (uint32_t)peer_reachable(c);
            }
            continue;
        }
        if (!c->acceptor && c->out_sent == sizeof c->out) { /* the ack follows our hello */
            if (c->ack_sent < sizeof c->ack_out &&
                (rc = stream_send(c, &c->ack_out, sizeof c->ack_out, &c->ack_sent, &moved)) != ECCL_OK)
                return rc;
            if (c->ack_sent == sizeof c->ack_out) return hello_finish(c, c->ack_out && c->in.ok);
        } else if (c->out_sent == sizeof c->out) {
            if ((rc = stream_recv(c, &c->ack_in, sizeof c->ack_in - c->ack_got, &c->ack_got, &moved)) !=
                ECCL_OK)
                return rc;
            if (c->ack_got == sizeof c->ack_in) {
                if (c->ack_in > 1) {
                    conn_break(c, ECCL_ERR_PROTOCOL, "malformed ack");
                    return c->err;
                }
                return hello_finish(c, c->ack_in && c->out.ok);
            }
        }
        if (!moved) break;
    }
    return c->err;
}

/* ---- bulk ------------------------------------------------------------------------ */

static eccl_bulk *bulk_get(eccl_conn *c)
{
    eccl_bulk *b = c->spare;
    if (b) c->spare = b->next;
    else b = malloc(sizeof *b);
    return b;
}

static void bulk_put(eccl_conn *c, eccl_bulk *b)
{
    b->next = c->spare;
    c->spare = b;
}

/* RTS for the isends that fit the peer's slots, in order. */
static void tx_pump(eccl_conn *c)
{
    eccl_bulk *b = c->tx_head;
    while (b && b->seq < c->tx_rts) b = b->next;
    for (; b && c->err == ECCL_OK && c->tx_rts - c->tx_fin < SLOTS; b = b->next) {
        atomic_store_explicit(&c->live[b->seq % SLOTS], b->seq + 1, memory_order_release);
        ctl_msg m = {.type = CTL_RTS, .seq = b->seq, .addr = (uint64_t)(uintptr_t)b->buf, .len = b->len};
        if (b->device >= 0) {
            m.flags = CTL_DEVICE;
            m.addr = b->off;
            memcpy(m.ipc, b->ipc, sizeof m.ipc);
        }
        ctl_send(c, &m);
        c->tx_rts++;
    }
}

/* The peer's device allocation `handle` names, mapped here (opened on
 * first use; the least recently used mapping makes room). NULL when it
 * cannot be mapped (the conn is then broken). */
static uint8_t *import_get(eccl_conn *c, const uint8_t *handle)
{
    import *slot = &c->imp[0];
    for (int i = 0; i < IMPORTS; i++) {
        import *x = &c->imp[i];
        if (x->base && memcmp(x->handle, handle, sizeof x->handle) == 0) {
            x->used = ++c->imp_clock;
            return x->base;
        }
        if (!x->base || (slot->base && x->used < slot->used)) slot = x;
    }
    if (slot->base) eccl_real_cuda_ipc_close(c->n->cuda, slot->device, slot->base);
    slot->base = NULL;
    int device = eccl_real_cuda_home_device(c->n->cuda);
    void *base = NULL;
    eccl_result rc = eccl_real_cuda_ipc_open(c->n->cuda, device, handle, &base);
    if (rc != ECCL_OK) {
        /* A broken context of ours is this rank's device failure, which
         * core reports as such (ECCL_ERR_DEVICE), not the link's. */
        conn_break(c, rc == ECCL_ERR_DEVICE ? rc : ECCL_ERR_CLOSED, "cannot map the peer's device memory");
        return NULL;
    }
    memcpy(slot->handle, handle, sizeof slot->handle);
    slot->base = base;
    slot->device = device;
    slot->used = ++c->imp_clock;
    return base;
}

static void imports_close(eccl_conn *c)
{
    for (int i = 0; i < IMPORTS; i++)
        if (c->imp[i].base) eccl_real_cuda_ipc_close(c->n->cuda, c->imp[i].device, c->imp[i].base);
    memset(c->imp, 0, sizeof c->imp);
}

/* Message m's bytes into b: out of the peer's address space (one
 * process_vm_readv that also reads the sender's live word after them: the
 * kernel reads remote iovecs in order), or out of its device memory
 * mapped here, then the live word. Still set after the bytes: the sender
 * held its buffer still during the whole read (it clears the word before
 * its buffer can change). 0 when the bytes are good. */
static int read_message(eccl_conn *c, eccl_bulk *b, const ctl_msg *m)
{
    uint64_t live = 0, live_addr = c->in.live_addr + (b->seq % SLOTS) * sizeof live;
    int fail = 0;
    if (m->flags & CTL_DEVICE) {
        fiu_do_on("eccl/net_shm/ipc", fail = 1);
        if (!eccl_real_cuda_has_ipc(c->n->cuda)) {
            conn_break(c, ECCL_ERR_PROTOCOL, "device memory offered to a process that cannot map it");
            return -1;
        }
        uint8_t *base = fail ? NULL : import_get(c, m->ipc);
        if (fail || (base && eccl_real_cuda_ipc_read(c->n->cuda, eccl_real_cuda_home_device(c->n->cuda), b->buf,
                                                     base + m->addr, b->len) != ECCL_OK)) {
            /* a failed copy out of mapped memory is our device's */
            conn_break(c, fail ? ECCL_ERR_CLOSED : ECCL_ERR_DEVICE, "cannot read the peer's device memory%s",
                       fail ? ": failpoint eccl/net_shm/ipc" : "");
            return -1;
        }
        if (!base) return -1; /* import_get broke the link */
        if (peer_read_word(c, &live, live_addr) != 0) {
            conn_break(c, ECCL_ERR_CLOSED, "cannot read the peer's live word: %s", strerror(errno));
            return -1;
        }
    } else {
        struct iovec to[2] = {{b->buf, b->len}, {&live, sizeof live}};
        struct iovec from[2] = {{(void *)(uintptr_t)m->addr, b->len}, {(void *)(uintptr_t)live_addr, sizeof live}};
        fiu_do_on("eccl/net_shm/read", fail = 1);
        if (fail || process_vm_readv(c->peer, to, 2, from, 2, 0) != (ssize_t)(b->len + sizeof live)) {
            conn_break(c, ECCL_ERR_CLOSED, "cannot read the peer's memory: %s",
                       fail ? "failpoint eccl/net_shm/read" : strerror(errno));
            return -1;
        }
    }
    if (live != b->seq + 1) {
        conn_break(c, ECCL_ERR_CLOSED, "the peer let go of a buffer while it was read");
        return -1;
    }
    return 0;
}

/* Reads every irecv whose RTS is here, in order, and answers each. */
static void rx_pump(eccl_conn *c)
{
    eccl_bulk *b = c->rx_head;
    while (b && b->done) b = b->next;
    for (; b && c->err == ECCL_OK && b->seq < c->rts_got; b = b->next) {
        const ctl_msg *m = &c->rts[b->seq % SLOTS];
        if (m->len != b->len) {
            conn_break(c, ECCL_ERR_PROTOCOL, "a message of another length than its receive");
            return;
        }
        if (read_message(c, b, m) != 0) return;
        b->done = 1;
        c->rx_done++;
        ctl_msg fin = {.type = CTL_FIN, .seq = b->seq,
                       .flags = eccl_real_cuda_has_ipc(c->n->cuda) ? CTL_CAN_IMPORT : 0};
        ctl_send(c, &fin);
    }
}

static void on_fin(eccl_conn *c, uint64_t seq, uint32_t flags)
{
    eccl_bulk *b = c->tx_head;
    while (b && b->done) b = b->next;
    if (seq != c->tx_fin || seq >= c->tx_rts || !b || b->seq != seq) {
        conn_break(c, ECCL_ERR_PROTOCOL, "a FIN out of order");
        return;
    }
    atomic_store_explicit(&c->live[seq % SLOTS], 0, memory_order_release);
    b->done = 1;
    c->tx_fin++;
    /* Learnt once the peer has device memory of its own (its CUDA is
     * open), never before: a host-only process does not load CUDA for us. */
    if (flags & CTL_CAN_IMPORT) c->peer_imports = 1;
}

static void on_rts(eccl_conn *c, const ctl_msg *m)
{
    if (m->seq != c->rts_got || c->rts_got - c->rx_done >= SLOTS || m->len == 0) {
        conn_break(c, ECCL_ERR_PROTOCOL, "an RTS out of order");
        return;
    }
    c->rts[m->seq % SLOTS] = *m;
    c->rts_got++;
}

/* Whether a datagram came from the peer's control socket: an abstract
 * name anyone on the host may send to until ours was connected to the
 * peer's (the hellos), so a stranger's datagram is dropped, not obeyed. */
static int from_peer(const eccl_conn *c, const struct sockaddr_un *sa, socklen_t len)
{
    size_t name = len > offsetof(struct sockaddr_un, sun_path) ? len - offsetof(struct sockaddr_un, sun_path) : 0;
    return name == c->in.ctl_len && memcmp(sa->sun_path, c->in.ctl, name) == 0;
}

/* Takes every control message waiting. */
static void ctl_drain(eccl_conn *c)
{
    while (c->err == ECCL_OK && c->ctl >= 0) {
        ctl_msg m;
        struct sockaddr_un sa;
        socklen_t len = sizeof sa;
        ssize_t got = recvfrom(c->ctl, &m, sizeof m, MSG_DONTWAIT, (struct sockaddr *)&sa, &len);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (got < 0 && errno == EINTR) continue;
        if (got >= 0 && !from_peer(c, &sa, len)) {
            LOG(c->n, ECCL_LOG_DEBUG, "link to %s: a control datagram from a stranger, dropped", c->addr);
            continue;
        }
        if (got != (ssize_t)sizeof m) {
            conn_break(c, got < 0 ? ECCL_ERR_CLOSED : ECCL_ERR_PROTOCOL, "control socket");
            return;
        }
        if (m.type == CTL_RTS) on_rts(c, &m);
        else if (m.type == CTL_FIN) on_fin(c, m.seq, m.flags);
        else conn_break(c, ECCL_ERR_PROTOCOL, "an unknown control message");
    }
}

/* A transfer still owed by or to the peer. */
static int bulk_waiting(const eccl_conn *c) { return c->tx_fin != c->tx_seq || c->rx_done != c->rx_seq; }

/* Only a conn with a transfer under way has anything to take: every RTS
 * comes with a header that makes core post its receive first, and every
 * FIN answers one of our sends. So a conn whose payloads all fit in the
 * stream pays no system call here. */
static void conn_progress(eccl_conn *c)
{
    if (!bulk_waiting(c)) return;
    ctl_drain(c);
    rx_pump(c);
    tx_pump(c);
    /* Core may not be reading the stream while a transfer waits: a peer
     * that died meanwhile is seen here. */
    if (c->err == ECCL_OK && bulk_waiting(c) && eccl_net_tcp_hung_up(c->s))
        conn_break(c, ECCL_ERR_CLOSED, "the peer closed the stream");
}

/* ---- net ops ---------------------------------------------------------------------- */

/* Whether news of this conn may soon come through the sockets alone: a
 * plain stream core reads, a hello under way, a transfer whose datagrams
 * (RTS, FIN) are due. While no conn's may, a polling `wait` looks at the
 * sockets less often (shm_wait). */
static void conn_count_prompt(eccl_conn *c, int prompt)
{
    if (atomic_exchange_explicit(&c->prompt, prompt, memory_order_relaxed) != prompt)
        atomic_fetch_add_explicit(&c->n->prompt, prompt ? 1 : -1, memory_order_relaxed);
}

static void conn_apply_interest(eccl_conn *c)
{
    int rd = c->want_read, wr = c->want_write;
    if (c->ring) {
        /* The stream carries bells (and the peer's end): read it while
         * core waits for bytes or for room; it is always writable. */
        rd = rd || wr;
        wr = 0;
    }
    if (c->mode == MODE_HELLO) {
        rd = 1;
        wr = (c->out_built && c->out_sent < sizeof c->out) ||
             (!c->acceptor && c->in_got == sizeof c->in && c->ack_sent < sizeof c->ack_out);
    }
    eccl_net_tcp_ops.set_interest(c->n->tcp, c->s, rd, wr);
    eccl_net_tcp_watch_hangup(c->n->tcp, c->s, bulk_waiting(c));
    conn_count_prompt(c, (!c->ring && c->want_read) || c->mode == MODE_HELLO || bulk_waiting(c));
}

static eccl_result shm_listen(void *ctx, const char *addr, void *user, eccl_listener **out,
                              char *bound)
{
    shm_net *n = ctx;
    eccl_listener *l = calloc(1, sizeof *l);
    if (!l) return ECCL_ERR_NO_MEMORY;
    char plain[ECCL_ADDR_MAX], mine[ECCL_ADDR_MAX];
    eccl_result rc = eccl_net_tcp_ops.listen(n->tcp, addr, user, &l->s, plain);
    if (rc == ECCL_OK && eccl_addr_prefixed(mine, sizeof mine, ECCL_SHM_ADDR_PREFIX, plain) != 0) {
        eccl_net_tcp_ops.close_listener(n->tcp, l->s);
        rc = ECCL_ERR_INVALID_ARG;
    }
    if (rc != ECCL_OK) {
        free(l);
        return rc;
    }
    if (!n->host[0]) {
        size_t len;
        const char *host = eccl_addr_host(plain, &len);
        memcpy(n->host, host, len);
        n->host[len] = '\0';
    }
    if (bound) memcpy(bound, mine, sizeof mine);
    *out = l;
    return ECCL_OK;
}

static void shm_close_listener(void *ctx, eccl_listener *l)
{
    shm_net *n = ctx;
    if (!l) return;
    eccl_net_tcp_ops.close_listener(n->tcp, l->s);
    free(l);
}

static eccl_conn *conn_new(shm_net *n, void *user)
{
    eccl_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->n = n;
    c->user = user;
    c->want_read = 1;
    c->ctl = -1;
    c->ibox_fd = -1;
    c->doorbell = -1;
    /* Any value that differs per conn: it proves the pid is the process
     * that wrote the hello, not what the value is. */
    c->probe = ++n->probes ^ ((uint64_t)(uintptr_t)c << 16) ^ (uint64_t)getpid() << 40;
    return c;
}

static void shm_close(void *ctx, eccl_conn *c);

static eccl_result shm_accept(void *ctx, eccl_listener *l, void *user, eccl_conn **out)
{
    shm_net *n = ctx;
    eccl_conn *c = conn_new(n, user);
    if (!c) return ECCL_ERR_NO_MEMORY;
    eccl_result rc = eccl_net_tcp_ops.accept(n->tcp, l->s, user, &c->s);
    if (rc != ECCL_OK) {
        free(c);
        return rc;
    }
    c->acceptor = 1;
    c->mode = MODE_HELLO; /* until the first bytes say which kind of peer */
    eccl_net_tcp_conn_addr(c->s, c->addr);
    *out = c;
    return ECCL_OK;
}

/* "shm:HOST:PORT" with our own listener's HOST: a host-mate. */
static int is_host_mate(const shm_net *n, const char *addr)
{
    if (!n->host[0] || strncmp(addr, ECCL_SHM_ADDR_PREFIX, strlen(ECCL_SHM_ADDR_PREFIX)) != 0) return 0;
    size_t len;
    const char *host = eccl_addr_host(addr, &len);
    return len == strlen(n->host) && memcmp(host, n->host, len) == 0;
}

static eccl_result shm_connect(void *ctx, const char *addr, void *user, eccl_conn **out)
{
    shm_net *n = ctx;
    if (!addr) return ECCL_ERR_INVALID_ARG;
    eccl_conn *c = conn_new(n, user);
    if (!c) return ECCL_ERR_NO_MEMORY;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    int mate = is_host_mate(n, addr);
    c->mode = mate ? MODE_HELLO : MODE_PLAIN;
    eccl_result rc = eccl_net_tcp_ops.connect(n->tcp, addr, user, &c->s); /* net_tcp drops the prefix */
    if (rc != ECCL_OK) {
        free(c);
        return rc;
    }
    if (mate) {
        c->ctl = ctl_open(&c->out);
        if (c->ctl < 0) {
            c->mode = MODE_PLAIN; /* nothing written yet: the acceptor sees a plain peer */
        } else {
            ibox_create(c);
            hello_build(c, 0);
            conn_apply_interest(c);
        }
    }
    *out = c;
    return ECCL_OK;
}

/* Core's bytes wait for the set-up: ECCL_OK once they may flow,
 * ECCL_ERR_AGAIN while the hellos are still going, or the conn's error. */
static eccl_result hello_gate(eccl_conn *c)
{
    if (c->err != ECCL_OK) return c->err;
    if (c->mode != MODE_HELLO) return ECCL_OK;
    eccl_result rc = hello_progress(c);
    conn_apply_interest(c);
    return rc != ECCL_OK ? rc : c->mode == MODE_HELLO ? ECCL_ERR_AGAIN : ECCL_OK;
}

static eccl_result shm_send(void *ctx, eccl_conn *c, const eccl_iov *iov, int n, size_t *sent)
{
    shm_net *x = ctx;
    *sent = 0;
    eccl_result rc = hello_gate(c);
    if (rc != ECCL_OK) return rc == ECCL_ERR_AGAIN ? ECCL_OK : rc;
    if (c->ring) return ring_send(c, iov, n, sent);
    return eccl_net_tcp_ops.send(x->tcp, c->s, iov, n, sent);
}

static eccl_result shm_recv(void *ctx, eccl_conn *c, void *buf, size_t len, size_t *got)
{
    shm_net *x = ctx;
    *got = 0;
    eccl_result rc = hello_gate(c);
    if (rc != ECCL_OK) return rc == ECCL_ERR_AGAIN ? ECCL_OK : rc;
    if (c->prefix_pos < c->prefix_len) {
        size_t k = c->prefix_len - c->prefix_pos < len ? c->prefix_len - c->prefix_pos : len;
        memcpy(buf, (const uint8_t *)&c->in + c->prefix_pos, k);
        c->prefix_pos += k;
        *got = k;
        return ECCL_OK;
    }
    if (c->ring) return ring_recv(c, buf, len, got);
    return eccl_net_tcp_ops.recv(x->tcp, c->s, buf, len, got);
}

static void shm_set_interest(void *ctx, eccl_conn *c, int read, int write)
{
    (void)ctx;
    atomic_store_explicit(&c->want_read, read != 0, memory_order_relaxed);
    atomic_store_explicit(&c->want_write, write != 0, memory_order_relaxed);
    conn_apply_interest(c);
}

static void shm_close(void *ctx, eccl_conn *c)
{
    shm_net *n = ctx;
    if (!c) return;
    /* First the live words: a read of one of our buffers that is still
     * going on in the peer is refused there, and core may reuse them once
     * this returns. */
    for (int i = 0; i < SLOTS; i++) atomic_store_explicit(&c->live[i], 0, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    ctl_close(c);
    imports_close(c);
    conn_count_prompt(c, 0);
    if (c->ring) rings_remove(c->n, c); /* before `wait` could look into a freed inbox */
    boxes_release(c);
    for (eccl_bulk **list = &c->tx_head; list; list = list == &c->tx_head ? &c->rx_head : NULL) {
        while (*list) {
            eccl_bulk *b = *list;
            *list = b->next;
            free(b);
        }
    }
    while (c->spare) {
        eccl_bulk *b = c->spare;
        c->spare = b->next;
        free(b);
    }
    if (c->s) eccl_net_tcp_ops.close(n->tcp, c->s);
    free(c);
}

/* The sockets' readiness (tcp's wait) added to ready[count..max), once each. */
static int sockets_wait(shm_net *n, uint64_t deadline_ns, void **ready, int count, int max)
{
    void *got[64];
    int k = eccl_net_tcp_ops.wait(n->tcp, deadline_ns, got, max - count < 64 ? max - count : 64);
    for (int i = 0; i < k; i++) {
        int dup = 0;
        for (int j = 0; j < count && !dup; j++) dup = ready[j] == got[i];
        if (!dup) ready[count++] = got[i];
    }
    return count;
}

/* While a thread polls (deadline 0), every conn talks through an inbox and
 * none waits for a datagram (conn_count_prompt), it looks at the sockets
 * (epoll: a system call) once per SHM_SOCKETS_EVERY_NS at most: a spinning
 * caller otherwise spent its spin inside epoll_pwait2 (1-2 us each on a
 * VM) and saw a host-mate's frame only between two of them. What is left
 * to the sockets then (a new connection, a peer's hang-up, a bell, which
 * only a sleeping reader needs) waits that much longer at most while it
 * spins; a thread about to block always looks. */
#define SHM_SOCKETS_EVERY_NS 20000u

static int sockets_due(shm_net *n)
{
    uint64_t now = eccl_real_now_ns();
    if (now - atomic_load_explicit(&n->sockets_at, memory_order_relaxed) < SHM_SOCKETS_EVERY_NS) return 0;
    atomic_store_explicit(&n->sockets_at, now, memory_order_relaxed);
    return 1;
}

/* Inboxes are looked into without a system call: a thread that polls
 * (deadline 0) sees a host-mate's frame as soon as it is there. One that
 * would block first tells every inbox so (their writers then ring), looks
 * once more, and only then sleeps in epoll. */
static int shm_wait(void *ctx, uint64_t deadline_ns, void **ready, int max)
{
    shm_net *n = ctx;
    if (max <= 0) return 0;
    int inboxes;
    int count = rings_scan(n, ready, 0, max, 0, &inboxes);
    if (count > 0 || deadline_ns == 0)
        return count < max && (!inboxes || atomic_load_explicit(&n->prompt, memory_order_relaxed) ||
                               sockets_due(n))
                   ? sockets_wait(n, 0, ready, count, max)
                   : count;
    count = rings_scan(n, ready, 0, max, +1, NULL);
    if (count == 0) count = sockets_wait(n, deadline_ns, ready, 0, max);
    return rings_scan(n, ready, count, max, -1, NULL);
}

static void shm_wake(void *ctx) { eccl_net_tcp_ops.wake(((shm_net *)ctx)->tcp); }

static size_t shm_bulk_min(void *ctx, eccl_conn *c)
{
    (void)ctx;
    /* Until the set-up is through, payloads go in the stream: an acceptor
     * does not know yet whether its peer shares its memory at all. */
    return c->mode == MODE_READY && c->shm ? c->n->min_bytes : 0;
}

/* Host payloads through the inbox where there is one, at every size: its
 * two copies (ours in, the peer's out, each of a ring that stays in cache)
 * pipeline on two cores and outrun the one process_vm_readv, which pins
 * every page it reads (N = 2 broadcasts of 1-64 MiB: 5.5-10 GB/s against
 * 2.2-5.8). ECCL_SHM_HOST_BULK_BYTES sets a size from which they are read
 * out of the sender's memory all the same. Not while our CUDA is open and
 * the peer has not said whether it maps device memory: only a FIN says
 * that, and only bulk gets FINs (the device-resident ring's first call
 * sends host slots, its next ones the device buffers themselves). */
static size_t shm_bulk_min_host(void *ctx, eccl_conn *c)
{
    shm_net *n = ctx;
    if (!c->ring || (!c->peer_imports && eccl_real_cuda_has_ipc(n->cuda))) return shm_bulk_min(ctx, c);
    return n->host_bulk_bytes ? n->host_bulk_bytes : SIZE_MAX;
}

static eccl_result bulk_new(eccl_conn *c, const void *buf, size_t len, int is_send, eccl_bulk **out)
{
    if (c->err != ECCL_OK) return c->err;
    if (c->mode != MODE_READY || !c->shm || len == 0) return ECCL_ERR_INVALID_ARG;
    eccl_bulk *b = bulk_get(c);
    if (!b) return ECCL_ERR_NO_MEMORY;
    *b = (eccl_bulk){.c = c, .is_send = is_send, .buf = (uint8_t *)buf, .len = len, .device = -1};
    eccl_bulk **head = is_send ? &c->tx_head : &c->rx_head, **tail = is_send ? &c->tx_tail : &c->rx_tail;
    b->seq = is_send ? c->tx_seq++ : c->rx_seq++;
    if (*tail) (*tail)->next = b;
    else *head = b;
    *tail = b;
    *out = b;
    return ECCL_OK;
}

static eccl_result shm_isend(void *ctx, eccl_conn *c, const void *buf, size_t len, eccl_bulk **req)
{
    (void)ctx;
    eccl_result rc = bulk_new(c, buf, len, 1, req);
    if (rc != ECCL_OK) return rc;
    tx_pump(c);
    conn_apply_interest(c);
    return c->err;
}

/* Device memory goes as a handle to its allocation, which the peer maps
 * (CUDA IPC): no copy on this side at all. Only once the peer said it can
 * map device memory, and only for memory legacy IPC can export. */
static int shm_bulk_device(void *ctx, eccl_conn *c, const void *buf, int device)
{
    shm_net *n = ctx;
    uint8_t handle[ECCL_CUDA_IPC_HANDLE_BYTES];
    size_t off;
    return c->err == ECCL_OK && c->mode == MODE_READY && c->shm && c->peer_imports &&
           eccl_real_cuda_ipc_export(n->cuda, device, buf, handle, &off) == ECCL_OK;
}

static eccl_result shm_isend_device(void *ctx, eccl_conn *c, const void *buf, size_t len, int device,
                                    eccl_bulk **req)
{
    shm_net *n = ctx;
    uint8_t handle[ECCL_CUDA_IPC_HANDLE_BYTES];
    size_t off;
    if (c->err != ECCL_OK) return c->err;
    if (!c->peer_imports) return ECCL_ERR_INVALID_ARG;
    if (eccl_real_cuda_ipc_export(n->cuda, device, buf, handle, &off) != ECCL_OK) return ECCL_ERR_DEVICE;
    eccl_result rc = bulk_new(c, buf, len, 1, req);
    if (rc != ECCL_OK) return rc;
    (*req)->device = device;
    (*req)->off = off;
    memcpy((*req)->ipc, handle, sizeof handle);
    tx_pump(c);
    conn_apply_interest(c);
    return c->err;
}

static eccl_result shm_irecv(void *ctx, eccl_conn *c, void *buf, size_t len, eccl_bulk **req)
{
    (void)ctx;
    /* Read at the next progress (core's channel calls it at once): a
     * progress here would take readiness that core must see. */
    eccl_result rc = bulk_new(c, buf, len, 0, req);
    if (rc == ECCL_OK) conn_apply_interest(c);
    return rc;
}

static eccl_result shm_progress(void *ctx, eccl_conn *c)
{
    (void)ctx;
    if (c->err != ECCL_OK || c->mode != MODE_READY || !c->shm) return c->err;
    conn_progress(c);
    conn_apply_interest(c);
    return c->err;
}

static eccl_result shm_test(void *ctx, eccl_bulk *b, int *done)
{
    (void)ctx;
    eccl_conn *c = b->c;
    *done = 0;
    if (c->err != ECCL_OK) return c->err;
    if (!b->done) return ECCL_OK;
    eccl_bulk **head = b->is_send ? &c->tx_head : &c->rx_head, **tail = b->is_send ? &c->tx_tail : &c->rx_tail;
    eccl_bulk *prev = NULL;
    for (eccl_bulk *x = *head; x != b; x = x->next) prev = x;
    if (prev) prev->next = b->next;
    else *head = b->next;
    if (*tail == b) *tail = prev;
    bulk_put(c, b);
    conn_apply_interest(c);
    *done = 1;
    return ECCL_OK;
}

static void shm_peer_addr(void *ctx, eccl_conn *c, char *addr)
{
    (void)ctx;
    eccl_net_tcp_conn_addr(c->s, addr);
}

const eccl_net_ops eccl_net_shm_ops = {
    .size = sizeof(eccl_net_ops),
    .listen = shm_listen,
    .accept = shm_accept,
    .close_listener = shm_close_listener,
    .connect = shm_connect,
    .send = shm_send,
    .recv = shm_recv,
    .set_interest = shm_set_interest,
    .close = shm_close,
    .wait = shm_wait,
    .wake = shm_wake,
    .bulk_min = shm_bulk_min,
    .isend = shm_isend,
    .irecv = shm_irecv,
    .progress = shm_progress,
    .test = shm_test,
    .bulk_device = shm_bulk_device,
    .isend_device = shm_isend_device,
    .peer_addr = shm_peer_addr,
    .bulk_min_host = shm_bulk_min_host,
};

/* ---- context ------------------------------------------------------------------------ */

/* Whether this process may read another's memory at all: its own, read the
 * same way (ENOSYS, EPERM under seccomp). Per peer, the hellos' probe
 * decides. */
static int cma_works(char *why)
{
    uint64_t word = 0x65636c6c, copy = 0;
    struct iovec local = {&copy, sizeof copy}, remote = {&word, sizeof word};
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof copy || copy != word) {
        snprintf(why, 160, "process_vm_readv refused (%s)", strerror(errno));
        return 0;
    }
    return 1;
}

/* The control sockets' queue must hold a conn's messages in flight. */
static int dgram_queue_ok(char *why)
{
    FILE *f = fopen("/proc/sys/net/unix/max_dgram_qlen", "r");
    long q = -1;
    if (!f) return 1; /* not Linux's procfs: assume the default */
    if (fscanf(f, "%ld", &q) != 1) q = -1;
    fclose(f);
    if (q >= 0 && q < 2 * SLOTS) {
        snprintf(why, 160, "net.unix.max_dgram_qlen is %ld, below %d", q, 2 * SLOTS);
        return 0;
    }
    return 1;
}

eccl_result eccl_net_shm_create(eccl_env *env, eccl_real_cuda *cuda, void **out, char *why)
{
    if (!cma_works(why) || !dgram_queue_ok(why)) return ECCL_ERR_UNSUPPORTED;
    shm_net *n = calloc(1, sizeof *n);
    if (!n) return ECCL_ERR_NO_MEMORY;
    n->env = env;
    n->cuda = eccl_config_uint(env, "ECCL_SHM_IPC", 0, 1, 1) ? cuda : NULL;
    size_t ring = (size_t)eccl_config_uint(env, "ECCL_SHM_RING_BYTES", 0, RING_MAX_BYTES, DEFAULT_RING_BYTES);
    if (ring) {
        n->ring_bytes = 4096;
        while (n->ring_bytes < ring) n->ring_bytes *= 2; /* a power of two */
    }
    pthread_mutex_init(&n->mu, NULL);
    n->min_bytes = (size_t)eccl_config_uint(env, "ECCL_SHM_MIN_BYTES", 1, 1ul << 30, DEFAULT_MIN_BYTES);
    n->host_bulk_bytes = (size_t)eccl_config_uint(env, "ECCL_SHM_HOST_BULK_BYTES", 0, 1ul << 30, 0);
    eccl_result rc = eccl_net_tcp_create(env, &n->tcp);
    if (rc != ECCL_OK) {
        pthread_mutex_destroy(&n->mu);
        free(n);
        return rc;
    }
    *out = n;
    return ECCL_OK;
}

void eccl_net_shm_destroy(void *ctx)
{
    shm_net *n = ctx;
    if (!n) return;
    eccl_net_tcp_destroy(n->tcp);
    pthread_mutex_destroy(&n->mu);
    free(n->rings);
    free(n);
}
