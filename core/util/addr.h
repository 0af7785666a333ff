/* A rank's host is the HOST of the address peers reach it on, "HOST:PORT":
 * everything before the last ':'. Ranks that give one host share a machine
 * (tests and eccl-emu emulate machines with 127.0.0.x; the simulator's
 * addresses name its hosts), and the chaos plan names hosts the same way. */
#ifndef ECCL_CORE_UTIL_ADDR_H
#define ECCL_CORE_UTIL_ADDR_H

#include <stddef.h>
#include <string.h>

static inline size_t eccl_addr_host_len(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    return colon ? (size_t)(colon - addr) : strlen(addr);
}

#endif
