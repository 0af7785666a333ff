/* A rank's host is the HOST of the address peers reach it on, "HOST:PORT"
 * after the transport's prefix if any ("ibv:", "shm:"): everything before
 * the last ':'. Ranks that give one host share a machine
 * (tests and eccl-emu emulate machines with 127.0.0.x; the simulator's
 * addresses name its hosts), and the chaos plan names hosts the same way. */
#ifndef ECCL_CORE_UTIL_ADDR_H
#define ECCL_CORE_UTIL_ADDR_H

#include <stddef.h>
#include <string.h>

/* addr without its transport's prefix: "HOST:PORT". A listener of a net
 * that takes plain stream connections too advertises "ibv:HOST:PORT" or
 * "shm:HOST:PORT", and a stream net dials it as HOST:PORT. */
static inline const char *eccl_addr_plain(const char *addr)
{
    return strncmp(addr, "ibv:", 4) == 0 || strncmp(addr, "shm:", 4) == 0 ? addr + 4 : addr;
}

/* The HOST of addr: where it starts, and its length in *len. */
static inline const char *eccl_addr_host(const char *addr, size_t *len)
{
    addr = eccl_addr_plain(addr);
    const char *colon = strrchr(addr, ':');
    *len = colon ? (size_t)(colon - addr) : strlen(addr);
    return addr;
}

/* prefix + addr into out (size bytes), as a net that takes plain stream
 * connections too advertises its listener ("ibv:", "shm:"); -1 when it
 * does not fit. */
static inline int eccl_addr_prefixed(char *out, size_t size, const char *prefix, const char *addr)
{
    size_t lp = strlen(prefix), la = strlen(addr);
    if (lp + la >= size) return -1;
    memcpy(out, prefix, lp);
    memcpy(out + lp, addr, la + 1);
    return 0;
}

#endif
