#include "coll/dissem.h"

static uint32_t ceil_log2(uint32_t n)
{
    uint32_t r = 0;
    while (((uint64_t)1 << r) < n) r++;
    return r;
}

void eccl_dissem_init(eccl_dissem *b, uint32_t rank, uint32_t n, int skip_two)
{
    b->rank = rank;
    b->n = n;
    b->rounds = n > 2 || (n == 2 && !skip_two) ? ceil_log2(n) : 0;
    b->sent = b->recv = 0;
}

uint32_t eccl_dissem_dst(const eccl_dissem *b, uint32_t k)
{
    return (uint32_t)(((uint64_t)b->rank + ((uint64_t)1 << k)) % b->n);
}

uint32_t eccl_dissem_src(const eccl_dissem *b, uint32_t k)
{
    uint64_t n = b->n;
    return (uint32_t)(((uint64_t)b->rank + n - ((uint64_t)1 << k) % n) % n);
}

static eccl_chan *peer(const eccl_coll_links *links, uint32_t rank)
{
    return links->peer ? links->peer(links->ctx, rank) : NULL;
}

void eccl_dissem_touch(const eccl_dissem *b, const eccl_coll_links *links)
{
    for (uint32_t k = 0; k < b->rounds; k++) {
        if (!(b->recv >> k & 1u)) (void)peer(links, eccl_dissem_src(b, k));
        if (!(b->sent >> k & 1u)) (void)peer(links, eccl_dissem_dst(b, k));
    }
}

eccl_result eccl_dissem_pump(eccl_dissem *b, const eccl_coll_links *links, uint64_t tag, uint32_t epoch,
                             uint8_t phase, uint32_t *inflight)
{
    for (uint32_t k = 0; k < b->rounds; k++) {
        if (b->sent >> k & 1u) continue;
        if (k > 0 && !(b->recv >> (k - 1) & 1u)) break;
        eccl_chan *ch = peer(links, eccl_dissem_dst(b, k));
        if (!ch) break;
        eccl_wire_data t = {.tag = tag, .epoch = epoch, .phase = phase, .step = (uint16_t)k};
        eccl_result rc = eccl_chan_send_data(ch, &t, NULL, inflight);
        if (rc != ECCL_OK) return rc;
        b->sent |= (uint64_t)1 << k;
    }
    return ECCL_OK;
}

uint32_t eccl_dissem_owed(const eccl_dissem *b, uint32_t from)
{
    for (uint32_t k = 0; k < b->rounds; k++)
        if (eccl_dissem_src(b, k) == from && !(b->recv >> k & 1u)) return k;
    return b->rounds;
}

int eccl_dissem_is_owed(const eccl_dissem *b, uint32_t from, const eccl_wire_data *d, uint8_t phase)
{
    uint32_t k = eccl_dissem_owed(b, from);
    return k < b->rounds && d->phase == phase && d->step == k && d->offset == 0 && d->len == 0;
}

void eccl_dissem_got(eccl_dissem *b, uint32_t round)
{
    if (round < b->rounds) b->recv |= (uint64_t)1 << round;
}

static int all_rounds(const eccl_dissem *b, uint64_t mask)
{
    return mask == (b->rounds ? (((uint64_t)1 << (b->rounds - 1)) << 1) - 1 : 0);
}

int eccl_dissem_done(const eccl_dissem *b) { return all_rounds(b, b->sent) && all_rounds(b, b->recv); }
