/* eccl_net_ops over non-blocking TCP sockets, one epoll instance and one
 * eventfd per env.
 *
 * Threading: core serialises every call on one env except `wait` and `wake`.
 * `wait` runs without the owner's mutex, possibly on two threads at once,
 * while other threads send, recv or close. So `wait` never touches a conn:
 * epoll's data.ptr holds the core's `user` pointer itself, and a conn closed
 * while `wait` sleeps cannot become a use-after-free here. Connection state
 * (connecting, up, failed) changes only inside the serialised calls.
 */
#include "net_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <fiu-local.h>

#include "env_real.h"
#include "util/addr.h"
#include "util/config.h"

#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 35)
#define HAVE_EPOLL_PWAIT2 1
#endif
#endif

/* Large enough for a fast link's bandwidth-delay product on LAN and for
 * 64 KiB-1 MiB slices to go out in one call. */
#define DEFAULT_SOCKET_BUF (4 << 20)
/* TCP_CONGESTION for our sockets; ECCL_TCP_CONGESTION="" keeps the system's. */
#define DEFAULT_CONGESTION "cubic"
#define LISTEN_BACKLOG 1024
/* A peer that vanishes without a FIN or RST (power loss, partition) is
 * declared dead after KEEPIDLE + KEEPCNT * KEEPINTVL = 8 s of silence, even
 * on a connection where neither side has anything to send. */
#define KEEPIDLE_S 5
#define KEEPINTVL_S 1
#define KEEPCNT 3
/* Core passes at most a handful of iovs; a larger n is served partially,
 * which send's contract allows. */
#define SEND_IOV_MAX 64
#if SEND_IOV_MAX > IOV_MAX
#error "SEND_IOV_MAX must not exceed IOV_MAX"
#endif
/* epoll events fetched per wait; more ready fds wait for the next call. */
#define WAIT_EVENTS_MAX 64

typedef struct tcp_ctx {
    eccl_env *env;
    int epfd;
    int evfd;
    int sockbuf;          /* SO_SNDBUF/SO_RCVBUF bytes; 0 = kernel autotuning */
    char congestion[16];  /* TCP_CONGESTION; "" = the system default */
    atomic_int no_pwait2; /* set once the kernel said ENOSYS */
    atomic_int waiters;   /* threads inside tcp_wait */
    atomic_int woken;     /* a waiter saw the eventfd; the last one drains */
} tcp_ctx;

enum conn_state { CONN_CONNECTING, CONN_UP, CONN_FAILED };

struct eccl_conn {
    int fd;
    int state;
    int want_read, want_write; /* the core's set_interest */
    int want_hangup;           /* report a closing peer even while not reading */
    int registered;            /* in the epoll set (not while interest is 0) */
    int accepted;              /* came from accept: "eccl/net/recv_accepted" applies */
    int first_read_pending;    /* accepted, no byte read yet: "eccl/net/recv_hello" applies */
    uint32_t events;           /* as registered with epoll now */
    void *user;
    char addr[ECCL_ADDR_MAX]; /* the peer, for log lines */
};

struct eccl_listener {
    int fd;
    void *user;
    char addr[ECCL_ADDR_MAX];
};

#define LOG(t, level, ...) eccl_real_log((t)->env, (level), __VA_ARGS__)

static void format_addr(const struct sockaddr_in *sa, char *buf)
{
    char ip[INET_ADDRSTRLEN];

    if (!inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof(ip)))
        snprintf(ip, sizeof(ip), "?");
    snprintf(buf, ECCL_ADDR_MAX, "%s:%u", ip, (unsigned)ntohs(sa->sin_port));
}

/* Splits "HOST:PORT" and resolves HOST to one IPv4 address. An empty HOST is
 * INADDR_ANY when passive (listen), loopback otherwise. Resolution of a name
 * may consult /etc/hosts or DNS and so block; numeric hosts never do. */
static eccl_result resolve(tcp_ctx *t, const char *addr, int passive,
                           struct sockaddr_in *sa)
{
    char host[ECCL_ADDR_MAX];
    const char *colon, *port;
    struct addrinfo hints, *res = NULL;
    unsigned long portnum;
    size_t hlen;
    char *end;
    int rc;

    /* A peer with RDMA or shared memory takes plain TCP too (util/addr.h). */
    if (addr)
        addr = eccl_addr_plain(addr);
    if (!addr || !(colon = strrchr(addr, ':')))
        goto bad;
    hlen = (size_t)(colon - addr);
    port = colon + 1;
    if (hlen >= sizeof(host) || *port < '0' || *port > '9')
        goto bad;
    portnum = strtoul(port, &end, 10);
    if (*end != '\0' || portnum > 65535)
        goto bad;
    memcpy(host, addr, hlen);
    host[hlen] = '\0';

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    rc = getaddrinfo(hlen ? host : NULL, port, &hints, &res);
    if (rc != 0 || !res) {
        LOG(t, ECCL_LOG_WARN, "resolve %s: %s", addr,
            rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        if (res)
            freeaddrinfo(res);
        return ECCL_ERR_CONNECT;
    }
    memcpy(sa, res->ai_addr, sizeof(*sa));
    freeaddrinfo(res);
    return ECCL_OK;
bad:
    LOG(t, ECCL_LOG_WARN, "bad address \"%s\" (want HOST:PORT)", addr ? addr : "(null)");
    return ECCL_ERR_INVALID_ARG;
}

static void set_opt(tcp_ctx *t, int fd, int level, int name, int value,
                    const char *what, const char *addr)
{
    if (setsockopt(fd, level, name, &value, sizeof(value)) != 0)
        LOG(t, ECCL_LOG_DEBUG, "setsockopt %s=%d on %s: %s", what, value, addr,
            strerror(errno));
}

/* Options of every data socket. Called before connect() so SO_RCVBUF is in
 * place when the SYN announces the window scale. Failures only cost
 * performance or dead-peer detection, so they are logged and ignored; the
 * kernel silently caps buffer sizes at net.core.[rw]mem_max. */
static void tune_socket(tcp_ctx *t, int fd, const char *addr)
{
    set_opt(t, fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY", addr);
    if (t->sockbuf > 0) {
        set_opt(t, fd, SOL_SOCKET, SO_SNDBUF, t->sockbuf, "SO_SNDBUF", addr);
        set_opt(t, fd, SOL_SOCKET, SO_RCVBUF, t->sockbuf, "SO_RCVBUF", addr);
    }
    /* A paced congestion control (BBR, a common default) collapses ring
     * throughput on a busy host: each stall lowers its rate estimate while
     * the collective needs bursts. Unknown or forbidden algorithms keep the
     * system default. */
    if (t->congestion[0] &&
        setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, t->congestion, (socklen_t)strlen(t->congestion)) != 0)
        LOG(t, ECCL_LOG_DEBUG, "TCP_CONGESTION=%s on %s: %s", t->congestion, addr, strerror(errno));
    set_opt(t, fd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE", addr);
    set_opt(t, fd, IPPROTO_TCP, TCP_KEEPIDLE, KEEPIDLE_S, "TCP_KEEPIDLE", addr);
    set_opt(t, fd, IPPROTO_TCP, TCP_KEEPINTVL, KEEPINTVL_S, "TCP_KEEPINTVL", addr);
    set_opt(t, fd, IPPROTO_TCP, TCP_KEEPCNT, KEEPCNT, "TCP_KEEPCNT", addr);
}

static uint32_t conn_events(const eccl_conn *c)
{
    uint32_t ev = 0;

    /* A half-close by the peer is an end of stream, i.e. readable; with
     * reading paused it must not be reported over and over. */
    if (c->want_read)
        ev |= EPOLLIN | EPOLLRDHUP;
    else if (c->want_hangup)
        ev |= EPOLLRDHUP;
    /* While connecting, writability is how the kernel says the handshake
     * finished (or failed), so it is watched whatever the caller asked. */
    if (c->state == CONN_CONNECTING || c->want_write)
        ev |= EPOLLOUT;
    return ev;
}

/* Brings the epoll registration in line with conn_events(). epoll reports
 * EPOLLERR and EPOLLHUP even for an empty mask, so a conn nobody wants to
 * hear from leaves the set; otherwise a reset peer would be reported at every
 * wait while core applies back-pressure, and the poller would spin. */
static eccl_result conn_update_events(tcp_ctx *t, eccl_conn *c)
{
    struct epoll_event ev;
    uint32_t want = conn_events(c);
    int op;

    if (want == c->events && c->registered == (want != 0))
        return ECCL_OK;
    if (want == 0) {
        epoll_ctl(t->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        c->registered = 0;
        c->events = 0;
        return ECCL_OK;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = want;
    ev.data.ptr = c->user;
    op = c->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(t->epfd, op, c->fd, &ev) != 0) {
        LOG(t, ECCL_LOG_WARN, "epoll_ctl %s %s: %s",
            op == EPOLL_CTL_ADD ? "ADD" : "MOD", c->addr, strerror(errno));
        return ECCL_ERR_SYSTEM;
    }
    c->registered = 1;
    c->events = want;
    return ECCL_OK;
}

/* Advances a connecting conn. Returns ECCL_OK while still connecting or once
 * up, ECCL_ERR_CONNECT once the connect failed (and from then on). */
static eccl_result conn_check_connect(tcp_ctx *t, eccl_conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLOUT};
    struct sockaddr_in peer;
    socklen_t len = sizeof(peer);
    int err = 0, rc;

    if (c->state != CONN_CONNECTING)
        return c->state == CONN_FAILED ? ECCL_ERR_CONNECT : ECCL_OK;
    /* SO_ERROR reads 0 both while in progress and once connected, so ask
     * poll whether the handshake is over at all. */
    do {
        rc = poll(&p, 1, 0);
    } while (rc < 0 && errno == EINTR);
    if (rc == 0)
        return ECCL_OK;
    if (rc < 0) {
        LOG(t, ECCL_LOG_WARN, "poll on connect to %s: %s", c->addr, strerror(errno));
        return ECCL_OK;
    }
    len = sizeof(err);
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    len = sizeof(peer);
    if (err == 0 && getpeername(c->fd, (struct sockaddr *)&peer, &len) != 0)
        err = errno;
    if (err != 0) {
        LOG(t, ECCL_LOG_WARN, "connect to %s: %s", c->addr, strerror(err));
        c->state = CONN_FAILED;
        conn_update_events(t, c);
        return ECCL_ERR_CONNECT;
    }
    LOG(t, ECCL_LOG_DEBUG, "connected to %s", c->addr);
    c->state = CONN_UP;
    conn_update_events(t, c);
    return ECCL_OK;
}

/* Registers a new conn (interest read=1, write=0); frees it and closes its
 * fd on failure. */
static eccl_result conn_register(tcp_ctx *t, eccl_conn *c, eccl_conn **out)
{
    c->want_read = 1;
    c->want_write = 0;
    if (conn_update_events(t, c) != ECCL_OK) {
        close(c->fd);
        free(c);
        return ECCL_ERR_SYSTEM;
    }
    *out = c;
    return ECCL_OK;
}

/* ---- listen / accept ----------------------------------------------------- */

static eccl_result tcp_listen(void *ctx, const char *addr, void *user,
                              eccl_listener **out, char *bound)
{
    tcp_ctx *t = ctx;
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    struct epoll_event ev;
    eccl_listener *l;
    eccl_result res;
    int fd;

    fiu_return_on("eccl/net/listen", ECCL_ERR_SYSTEM);
    if (!t || !out)
        return ECCL_ERR_INVALID_ARG;
    res = resolve(t, addr, 1, &sa);
    if (res != ECCL_OK)
        return res == ECCL_ERR_CONNECT ? ECCL_ERR_SYSTEM : res;
    l = calloc(1, sizeof(*l));
    if (!l)
        return ECCL_ERR_NO_MEMORY;
    l->user = user;
    snprintf(l->addr, sizeof(l->addr), "%s", addr);

    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        LOG(t, ECCL_LOG_WARN, "socket for listen on %s: %s", addr, strerror(errno));
        goto fail;
    }
    /* A restarted master must rebind its port while old connections linger
     * in TIME_WAIT. */
    set_opt(t, fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR", addr);
    /* Accepted sockets inherit this; it has to be in place before the
     * handshake for the window scale to allow the full buffer. */
    if (t->sockbuf > 0)
        set_opt(t, fd, SOL_SOCKET, SO_RCVBUF, t->sockbuf, "SO_RCVBUF", addr);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        LOG(t, ECCL_LOG_WARN, "bind %s: %s", addr, strerror(errno));
        goto fail;
    }
    if (listen(fd, LISTEN_BACKLOG) != 0) {
        LOG(t, ECCL_LOG_WARN, "listen on %s: %s", addr, strerror(errno));
        goto fail;
    }
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        LOG(t, ECCL_LOG_WARN, "getsockname for %s: %s", addr, strerror(errno));
        goto fail;
    }
    format_addr(&sa, l->addr);

    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.ptr = user;
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        LOG(t, ECCL_LOG_WARN, "epoll_ctl ADD listener %s: %s", l->addr, strerror(errno));
        goto fail;
    }
    l->fd = fd;
    if (bound)
        snprintf(bound, ECCL_ADDR_MAX, "%s", l->addr);
    LOG(t, ECCL_LOG_DEBUG, "listening on %s", l->addr);
    *out = l;
    return ECCL_OK;
fail:
    if (fd >= 0)
        close(fd);
    free(l);
    return ECCL_ERR_SYSTEM;
}

static eccl_result tcp_accept(void *ctx, eccl_listener *l, void *user,
                              eccl_conn **out)
{
    tcp_ctx *t = ctx;
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    eccl_conn *c;
    int fd;

    fiu_return_on("eccl/net/accept", ECCL_ERR_SYSTEM);
    if (!t || !l || !out)
        return ECCL_ERR_INVALID_ARG;
    do {
        fd = accept4(l->fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        switch (errno) {
        case EAGAIN:
#if EWOULDBLOCK != EAGAIN
        case EWOULDBLOCK:
#endif
            return ECCL_ERR_AGAIN;
        /* The connection died in the backlog or the network hiccuped;
         * accept(2) says to retry as for EAGAIN. The listener stays
         * readable while anything else is queued. */
        case ECONNABORTED:
        case EPROTO:
        case ENETDOWN:
        case ENOPROTOOPT:
        case EHOSTDOWN:
        case ENONET:
        case EHOSTUNREACH:
        case EOPNOTSUPP:
        case ENETUNREACH:
            LOG(t, ECCL_LOG_DEBUG, "accept on %s: %s", l->addr, strerror(errno));
            return ECCL_ERR_AGAIN;
        default:
            /* EMFILE and friends: the pending connection stays queued. */
            LOG(t, ECCL_LOG_WARN, "accept on %s: %s", l->addr, strerror(errno));
            return ECCL_ERR_SYSTEM;
        }
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return ECCL_ERR_NO_MEMORY;
    }
    c->fd = fd;
    c->state = CONN_UP;
    c->accepted = c->first_read_pending = 1;
    c->user = user;
    format_addr(&sa, c->addr);
    tune_socket(t, fd, c->addr);
    LOG(t, ECCL_LOG_DEBUG, "accepted %s on %s", c->addr, l->addr);
    return conn_register(t, c, out);
}

static void tcp_close_listener(void *ctx, eccl_listener *l)
{
    tcp_ctx *t = ctx;

    if (!l)
        return;
    epoll_ctl(t->epfd, EPOLL_CTL_DEL, l->fd, NULL);
    close(l->fd);
    free(l);
}

/* ---- conns --------------------------------------------------------------- */

static eccl_result tcp_connect(void *ctx, const char *addr, void *user,
                               eccl_conn **out)
{
    tcp_ctx *t = ctx;
    struct sockaddr_in sa;
    eccl_result res;
    eccl_conn *c;
    int rc;

    fiu_return_on("eccl/net/connect", ECCL_ERR_CONNECT);
    if (!t || !out)
        return ECCL_ERR_INVALID_ARG;
    res = resolve(t, addr, 0, &sa);
    if (res != ECCL_OK)
        return res;
    c = calloc(1, sizeof(*c));
    if (!c)
        return ECCL_ERR_NO_MEMORY;
    c->user = user;
    format_addr(&sa, c->addr);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        LOG(t, ECCL_LOG_WARN, "socket for %s: %s", c->addr, strerror(errno));
        free(c);
        return ECCL_ERR_SYSTEM;
    }
    tune_socket(t, c->fd, c->addr);

    /* On EINTR a non-blocking connect goes on in the background, exactly as
     * on EINPROGRESS; calling connect() again would only say EALREADY. */
    rc = connect(c->fd, (struct sockaddr *)&sa, sizeof(sa));
    if (rc == 0) {
        c->state = CONN_UP;
    } else if (errno == EINPROGRESS || errno == EINTR) {
        c->state = CONN_CONNECTING;
    } else {
        /* Refused at once (or no route, or no ephemeral port). Reported
         * through send/recv like a late failure, so core has one path; the
         * unconnected socket polls as EPOLLHUP, so `wait` reports it. */
        LOG(t, ECCL_LOG_WARN, "connect to %s: %s", c->addr, strerror(errno));
        c->state = CONN_FAILED;
    }
    return conn_register(t, c, out);
}

static eccl_result tcp_send(void *ctx, eccl_conn *c, const eccl_iov *iov, int n,
                            size_t *sent)
{
    tcp_ctx *t = ctx;
    struct iovec v[SEND_IOV_MAX];
    struct msghdr msg;
    eccl_result res;
    ssize_t w;

    if (sent)
        *sent = 0;
    fiu_return_on("eccl/net/send", ECCL_ERR_CLOSED);
    if (!t || !c || !sent || (n > 0 && !iov))
        return ECCL_ERR_INVALID_ARG;
    res = conn_check_connect(t, c);
    if (res != ECCL_OK || c->state != CONN_UP || n <= 0)
        return res;
    if (n > SEND_IOV_MAX)
        n = SEND_IOV_MAX;
    for (int i = 0; i < n; i++) {
        v[i].iov_base = (void *)iov[i].base;
        v[i].iov_len = iov[i].len;
    }
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = v;
    msg.msg_iovlen = (size_t)n;
    /* MSG_NOSIGNAL: a peer that closed yields EPIPE instead of a SIGPIPE
     * that would kill the application's process. */
    do {
        w = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w >= 0) {
        *sent = (size_t)w;
        return ECCL_OK;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return ECCL_OK;
    /* A peer going away is routine under churn; anything else is worth a
     * warning. Either way the stream is unusable now. */
    LOG(t, (errno == EPIPE || errno == ECONNRESET) ? ECCL_LOG_DEBUG : ECCL_LOG_WARN,
        "send to %s: %s", c->addr, strerror(errno));
    return ECCL_ERR_CLOSED;
}

static eccl_result tcp_recv(void *ctx, eccl_conn *c, void *buf, size_t len,
                            size_t *got)
{
    tcp_ctx *t = ctx;
    eccl_result res;
    ssize_t r;

    if (got)
        *got = 0;
    fiu_return_on("eccl/net/recv", ECCL_ERR_CLOSED);
    if (!t || !c || !got || (len > 0 && !buf))
        return ECCL_ERR_INVALID_ARG;
    /* Reads on the accepting side only: a test can fail a peer link
     * without reaching the links the process dialled (its master's);
     * "recv_hello" only the first read, a new link's hello, never one that
     * already carries an op's frames. */
    if (c->accepted)
        fiu_return_on("eccl/net/recv_accepted", ECCL_ERR_CLOSED);
    if (c->first_read_pending)
        fiu_return_on("eccl/net/recv_hello", ECCL_ERR_CLOSED);
    res = conn_check_connect(t, c);
    /* len 0 must not reach recv(), whose 0 would read as end of stream. */
    if (res != ECCL_OK || c->state != CONN_UP || len == 0)
        return res;
    do {
        r = recv(c->fd, buf, len, 0);
    } while (r < 0 && errno == EINTR);
    if (r > 0) {
        c->first_read_pending = 0;
        *got = (size_t)r;
        return ECCL_OK;
    }
    if (r == 0) {
        LOG(t, ECCL_LOG_DEBUG, "recv from %s: end of stream", c->addr);
        return ECCL_ERR_CLOSED;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return ECCL_OK;
    LOG(t, errno == ECONNRESET ? ECCL_LOG_DEBUG : ECCL_LOG_WARN, "recv from %s: %s",
        c->addr, strerror(errno));
    return ECCL_ERR_CLOSED;
}

static void tcp_set_interest(void *ctx, eccl_conn *c, int read, int write)
{
    tcp_ctx *t = ctx;

    if (!c)
        return;
    c->want_read = read != 0;
    c->want_write = write != 0;
    /* Settling a finished handshake here too stops a connected conn from
     * being reported writable when nobody asked. */
    if (c->state == CONN_CONNECTING)
        conn_check_connect(t, c);
    conn_update_events(t, c);
}

static void tcp_close(void *ctx, eccl_conn *c)
{
    tcp_ctx *t = ctx;

    if (!c)
        return;
    /* Explicit DEL: a registration lives as long as the open file
     * description, which a fork()ed child may still hold. */
    if (c->registered)
        epoll_ctl(t->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
}

/* ---- wait / wake --------------------------------------------------------- */

static int epoll_wait_until(tcp_ctx *t, struct epoll_event *evs, int nev,
                            uint64_t deadline_ns)
{
    uint64_t now, rem;
    long long ms;
    int n;

    for (;;) {
        rem = 0;
        if (deadline_ns == UINT64_MAX) {
            /* Core's "no deadline". */
            n = epoll_wait(t->epfd, evs, nev, -1);
            if (n < 0 && errno == EINTR)
                continue;
            return n;
        }
        if (deadline_ns != 0) {
            now = eccl_real_now_ns();
            rem = deadline_ns > now ? deadline_ns - now : 0;
        }
#ifdef HAVE_EPOLL_PWAIT2
        if (!atomic_load_explicit(&t->no_pwait2, memory_order_relaxed)) {
            struct timespec ts = {.tv_sec = (time_t)(rem / 1000000000u),
                                  .tv_nsec = (long)(rem % 1000000000u)};
            n = epoll_pwait2(t->epfd, evs, nev, &ts, NULL);
            if (n < 0 && errno == ENOSYS) {
                /* Kernel older than 5.11 (or a sandbox without it). */
                atomic_store_explicit(&t->no_pwait2, 1, memory_order_relaxed);
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            return n;
        }
#endif
        /* Millisecond timeouts round up: rounding down would wake before
         * the deadline and make the caller spin until it passes. */
        ms = rem / 1000000u >= INT_MAX ? INT_MAX
                                       : (long long)(rem / 1000000u + (rem % 1000000u != 0));
        n = epoll_wait(t->epfd, evs, nev, (int)ms);
        if (n < 0 && errno == EINTR)
            continue;
        return n;
    }
}

static void drain_eventfd(tcp_ctx *t)
{
    uint64_t v;
    ssize_t r;

    /* One read resets a non-semaphore eventfd to zero. */
    do {
        r = read(t->evfd, &v, sizeof(v));
    } while (r < 0 && errno == EINTR);
}

static int tcp_wait(void *ctx, uint64_t deadline_ns, void **ready, int max)
{
    tcp_ctx *t = ctx;
    struct epoll_event evs[WAIT_EVENTS_MAX];
    int n, count = 0;

    if (!t || !ready || max <= 0)
        return 0;
    atomic_fetch_add(&t->waiters, 1);
    n = epoll_wait_until(t, evs, max < WAIT_EVENTS_MAX ? max : WAIT_EVENTS_MAX,
                         deadline_ns);
    if (n < 0) {
        LOG(t, ECCL_LOG_WARN, "epoll_wait: %s", strerror(errno));
        n = 0;
    }
    for (int i = 0; i < n; i++) {
        void *user = evs[i].data.ptr;
        int dup = 0;

        if (user == &t->evfd) {
            atomic_store(&t->woken, 1);
            continue;
        }
        /* Several conns may share one user pointer; report it once. */
        for (int j = 0; j < count && !dup; j++)
            dup = ready[j] == user;
        if (!dup)
            ready[count++] = user;
    }
    /* Two threads may wait at once and a wake must reach both: the eventfd
     * stays readable (level-triggered, so every sleeper sees it) until the
     * last thread inside wait leaves. Draining at once would let the first
     * thread swallow the wake-up while the second sleeps on. */
    if (atomic_fetch_sub(&t->waiters, 1) == 1 && atomic_exchange(&t->woken, 0))
        drain_eventfd(t);
    return count;
}

static void tcp_wake(void *ctx)
{
    tcp_ctx *t = ctx;
    uint64_t one = 1;
    ssize_t w;

    /* EAGAIN means the counter is saturated: a wake-up is pending anyway. */
    do {
        w = write(t->evfd, &one, sizeof(one));
    } while (w < 0 && errno == EINTR);
}

static void tcp_peer_addr(void *ctx, eccl_conn *c, char *addr)
{
    (void)ctx;
    eccl_net_tcp_conn_addr(c, addr);
}

const eccl_net_ops eccl_net_tcp_ops = {
    .size = sizeof(eccl_net_ops),
    .listen = tcp_listen,
    .accept = tcp_accept,
    .close_listener = tcp_close_listener,
    .connect = tcp_connect,
    .send = tcp_send,
    .recv = tcp_recv,
    .set_interest = tcp_set_interest,
    .close = tcp_close,
    .wait = tcp_wait,
    .wake = tcp_wake,
    .peer_addr = tcp_peer_addr,
};

/* ---- context ------------------------------------------------------------- */

eccl_result eccl_net_tcp_create(eccl_env *env, void **out)
{
    tcp_ctx *t = calloc(1, sizeof(*t));
    struct epoll_event ev;

    if (!t)
        return ECCL_ERR_NO_MEMORY;
    t->env = env;
    t->evfd = -1;
    t->sockbuf = (int)eccl_config_uint(env, "ECCL_SOCKET_BUF", 0, INT_MAX, DEFAULT_SOCKET_BUF);
    const char *cc = getenv("ECCL_TCP_CONGESTION");
    snprintf(t->congestion, sizeof t->congestion, "%s", cc ? cc : DEFAULT_CONGESTION);
    atomic_init(&t->no_pwait2, 0);
    atomic_init(&t->waiters, 0);
    atomic_init(&t->woken, 0);
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (t->epfd < 0) {
        eccl_real_log(env, ECCL_LOG_ERROR, "epoll_create1: %s", strerror(errno));
        goto fail;
    }
    t->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->evfd < 0) {
        eccl_real_log(env, ECCL_LOG_ERROR, "eventfd: %s", strerror(errno));
        goto fail;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    /* No user pointer can equal an address inside this context. */
    ev.data.ptr = &t->evfd;
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->evfd, &ev) != 0) {
        eccl_real_log(env, ECCL_LOG_ERROR, "epoll_ctl ADD eventfd: %s", strerror(errno));
        goto fail;
    }
    *out = t;
    return ECCL_OK;
fail:
    eccl_net_tcp_destroy(t);
    return ECCL_ERR_SYSTEM;
}

void eccl_net_tcp_destroy(void *ctx)
{
    tcp_ctx *t = ctx;

    if (!t)
        return;
    if (t->evfd >= 0)
        close(t->evfd);
    if (t->epfd >= 0)
        close(t->epfd);
    free(t);
}

int eccl_net_tcp_conn_fd(const eccl_conn *c)
{
    return c ? c->fd : -1;
}

int eccl_net_tcp_wake_fd(void *ctx)
{
    return ctx ? ((tcp_ctx *)ctx)->evfd : -1;
}

void eccl_net_tcp_conn_addr(const eccl_conn *c, char *addr)
{
    snprintf(addr, ECCL_ADDR_MAX, "%s", c->addr);
}

void eccl_net_tcp_watch_hangup(void *ctx, eccl_conn *c, int on)
{
    c->want_hangup = on != 0;
    conn_update_events(ctx, c);
}

int eccl_net_tcp_hung_up(const eccl_conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};

    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

eccl_result eccl_net_tcp_watch_fd(void *ctx, int fd, void *user, int edge)
{
    tcp_ctx *t = ctx;
    struct epoll_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | (edge ? EPOLLET : 0);
    ev.data.ptr = user;
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        LOG(t, ECCL_LOG_WARN, "epoll_ctl ADD fd %d: %s", fd, strerror(errno));
        return ECCL_ERR_SYSTEM;
    }
    return ECCL_OK;
}

void eccl_net_tcp_unwatch_fd(void *ctx, int fd)
{
    tcp_ctx *t = ctx;

    epoll_ctl(t->epfd, EPOLL_CTL_DEL, fd, NULL);
}
