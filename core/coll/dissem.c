#include "coll/dissem.h"

void eccl_dissem_init(eccl_dissem *b, uint32_t rank, uint32_t nranks)
{
    b->rank = rank;
    b->nranks = nranks;
    b->rounds = eccl_ceil_log2(nranks);
    b->sent = b->recv = 0;
}

uint32_t eccl_dissem_dst(const eccl_dissem *b, uint32_t k)
{
    return (uint32_t)(((uint64_t)b->rank + ((uint64_t)1 << k)) % b->nranks);
}

uint32_t eccl_dissem_src(const eccl_dissem *b, uint32_t k)
{
    uint64_t n = b->nranks;
    return (uint32_t)(((uint64_t)b->rank + n - ((uint64_t)1 << k) % n) % n);
}

void eccl_dissem_touch(const eccl_dissem *b, const eccl_coll_links *links)
{
    for (uint32_t k = 0; k < b->rounds; k++) {
        if (!(b->recv >> k & 1u)) (void)eccl_coll_peer(links, eccl_dissem_src(b, k));
        if (!(b->sent >> k & 1u)) (void)eccl_coll_peer(links, eccl_dissem_dst(b, k));
    }
}

eccl_result eccl_dissem_pump(eccl_dissem *b, const eccl_coll_links *links, uint64_t tag, uint32_t epoch,
                             uint8_t phase, uint32_t *inflight)
{
    for (uint32_t k = 0; k < b->rounds; k++) {
        if (b->sent >> k & 1u) continue;
        if (k > 0 && !(b->recv >> (k - 1) & 1u)) break;
        eccl_chan *ch = eccl_coll_peer(links, eccl_dissem_dst(b, k));
        if (!ch) break;
        eccl_wire_data t = {.tag = tag, .epoch = epoch, .phase = phase, .step = (uint16_t)k};
        eccl_result rc = eccl_coll_send_token(links->lazy_tokens, ch, &t, inflight);
        if (rc != ECCL_OK) return rc;
        b->sent |= (uint64_t)1 << k;
    }
    return ECCL_OK;
}

int eccl_dissem_owes(const eccl_dissem *b, uint32_t rank)
{
    for (uint32_t k = 0; k < b->rounds; k++)
        if (!(b->sent >> k & 1u) && eccl_dissem_dst(b, k) == rank) return 1;
    return 0;
}

uint32_t eccl_dissem_owed(const eccl_dissem *b, uint32_t rank)
{
    for (uint32_t k = 0; k < b->rounds; k++)
        if (eccl_dissem_src(b, k) == rank && !(b->recv >> k & 1u)) return k;
    return b->rounds;
}

eccl_result eccl_dissem_check(const eccl_dissem *b, uint32_t rank, uint8_t phase, const eccl_wire_data *d)
{
    uint32_t k = eccl_dissem_owed(b, rank);
    if (k == b->rounds || d->phase != phase || d->step != k || d->offset != 0 || d->len != 0)
        return ECCL_ERR_PROTOCOL;
    return ECCL_OK;
}

void eccl_dissem_got(eccl_dissem *b, const eccl_wire_data *d) { b->recv |= (uint64_t)1 << d->step; }

static int all_rounds(const eccl_dissem *b, uint64_t mask)
{
    return mask == (b->rounds ? (((uint64_t)1 << (b->rounds - 1)) << 1) - 1 : 0);
}

int eccl_dissem_done(const eccl_dissem *b) { return all_rounds(b, b->sent) && all_rounds(b, b->recv); }
