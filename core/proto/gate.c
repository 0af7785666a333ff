#include "proto/gate.h"

#include <stdlib.h>
#include <string.h>

#include "state/hash.h"
#include "util/addr.h"
#include "util/config.h"

#define DEFAULT_PENDING_MAX 256u
#define DEFAULT_PER_HOST 32u
#define DEFAULT_TIMEOUT_MS 3000u

eccl_result eccl_gate_init(eccl_gate *g, const eccl_env *env)
{
    memset(g, 0, sizeof *g);
    if (!env->auth) return ECCL_OK;
    uint32_t cap = (uint32_t)eccl_config_uint(env, "ECCL_AUTH_PENDING_MAX", 1, 1u << 20, DEFAULT_PENDING_MAX);
    g->per_host = (uint32_t)eccl_config_uint(env, "ECCL_AUTH_PENDING_PER_HOST", 1, cap, DEFAULT_PER_HOST < cap ? DEFAULT_PER_HOST : cap);
    g->timeout_ns = eccl_config_uint(env, "ECCL_AUTH_TIMEOUT_MS", 1, 3600000u, DEFAULT_TIMEOUT_MS) * 1000000u;
    if (!(g->e = calloc(cap, sizeof *g->e))) return ECCL_ERR_NO_MEMORY;
    g->cap = cap;
    return ECCL_OK;
}

void eccl_gate_free(eccl_gate *g)
{
    free(g->e);
    memset(g, 0, sizeof *g);
}

uint64_t eccl_gate_host_of(const eccl_env *env, eccl_conn *conn)
{
    if (!eccl_net_has_peer_addr(env)) return 0;
    char addr[ECCL_ADDR_MAX] = "";
    env->net->peer_addr(env->net_ctx, conn, addr);
    size_t len;
    const char *host = eccl_addr_host(addr, &len);
    return len ? eccl_hash(ECCL_HASH_SIMPLE, host, len) | 1u : 0;
}

static eccl_gate_entry *slot(eccl_gate *g, uint32_t i) { return &g->e[(g->head + i) % g->cap]; }

/* Whether slot i still holds a pending conn; one that proved itself
 * since is let out here. */
static int pending(eccl_gate *g, uint32_t i)
{
    eccl_gate_entry *e = slot(g, i);
    if (e->who && !e->ch->auth) {
        e->who = NULL;
        g->n--;
    }
    return e->who != NULL;
}

/* Drops left slots at the head; packs the rest when every slot is used. */
static void tidy(eccl_gate *g)
{
    while (g->used && !pending(g, 0)) {
        g->head = (g->head + 1) % g->cap;
        g->used--;
    }
    if (g->used < g->cap || g->n == g->used) return;
    uint32_t w = 0;
    for (uint32_t i = 0; i < g->used; i++)
        if (pending(g, i)) *slot(g, w++) = *slot(g, i);
    g->used = w;
}

static void *take_oldest(eccl_gate *g)
{
    void *who = slot(g, 0)->who;
    slot(g, 0)->who = NULL;
    g->n--;
    tidy(g);
    return who;
}

int eccl_gate_enter(eccl_gate *g, void *who, const eccl_chan *ch, uint64_t host, uint64_t now, void **evict)
{
    *evict = NULL;
    if (!g->cap) return 1;
    tidy(g);
    if (host) {
        uint32_t same = 0;
        for (uint32_t i = 0; i < g->used; i++) same += pending(g, i) && slot(g, i)->host == host;
        if (same >= g->per_host) {
            g->refused++;
            return 0;
        }
    }
    if (g->n == g->cap) { /* some may have proved themselves since */
        for (uint32_t i = 0; i < g->used; i++) pending(g, i);
        tidy(g);
    }
    if (g->n == g->cap) {
        *evict = take_oldest(g);
        g->evicted++;
    }
    tidy(g);
    *slot(g, g->used++) = (eccl_gate_entry){who, ch, now, host};
    g->n++;
    return 1;
}

void eccl_gate_leave(eccl_gate *g, void *who)
{
    for (uint32_t i = 0; i < g->used; i++) {
        if (slot(g, i)->who != who) continue;
        slot(g, i)->who = NULL;
        g->n--;
        tidy(g);
        return;
    }
}

void *eccl_gate_expired(eccl_gate *g, uint64_t now)
{
    if (g->cap) tidy(g);
    if (!g->n || now - slot(g, 0)->since < g->timeout_ns) return NULL;
    g->expired++;
    return take_oldest(g);
}

uint64_t eccl_gate_deadline(const eccl_gate *g)
{
    /* Maybe a conn that proved itself since: its deadline passes early,
     * and eccl_gate_expired lets it out then. */
    return g->n ? g->e[g->head].since + g->timeout_ns : UINT64_MAX;
}
