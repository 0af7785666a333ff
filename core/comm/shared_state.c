/* eccl_comm_sync_shared_state: vote, fetch, serve (state/sync.h). */
#include "comm/comm_internal.h"

/* ---- shared state ------------------------------------------------------------ */

void comm_side_links_close(eccl_comm *c, uint32_t purpose)
{
    for (p2p_link *l = c->side_links, *n; l; l = n) {
        n = l->next;
        if (l->purpose == purpose) comm_link_close(c, l);
    }
}

/* The call's outcome is known: no byte moves into or out of the tensors
 * after this (closing drops queued frames that point into them). */
void comm_sync_finish(eccl_comm *c, eccl_result result, uint64_t revision)
{
    if (!c->sync.active || c->sync.phase == SY_DONE) return;
    comm_side_links_close(c, ECCL_LINK_SYNC);
    c->sync.phase = SY_DONE;
    c->sync.result = result;
    c->sync.revision = revision;
}

static void sync_report(eccl_comm *c, eccl_result result)
{
    eccl_msg m = {.type = ECCL_MSG_SYNC_REPORT};
    m.u.sync_result.seq = c->sync.seq;
    m.u.sync_result.result = (uint32_t)result;
    if (c->master_open) comm_master_send(c, &m);
}

/* Our fetches failed (a holder lost, bad bytes): tell the master, which
 * ends the round for everyone with this error; wait for its SYNC_DONE.
 * Links are not closed here: this may run inside a link's read. */
static void sync_fetch_failed(eccl_comm *c, eccl_result why)
{
    if (!c->sync.active || c->sync.phase != SY_FETCHING) return;
    ECCL_WARN(c->env, "shared-state fetch failed: %s", eccl_strerror(why));
    c->sync.phase = SY_REPORTED;
    sync_report(c, why);
}

static p2p_link *sync_connect(eccl_comm *c, uint32_t src, eccl_result *rc)
{
    p2p_link *l = comm_link_connect_in(c, &c->side_links, &c->sync.src[src], ECCL_LINK_SYNC,
                                       c->sync.round, 0, 0, rc);
    if (l) {
        l->sync_fetcher = 1;
        l->sync_src = src;
    }
    return l;
}

eccl_result comm_sync_on_plan(eccl_comm *c, const eccl_msg_sync_plan *p)
{
    comm_sync *s = &c->sync;
    if (!s->active || s->phase != SY_ASKED || p->seq != s->seq) return ECCL_OK; /* stale */
    if (p->result != ECCL_OK) {
        ECCL_WARN(c->env, "shared-state sync refused: %s", eccl_strerror((eccl_result)p->result));
        comm_sync_finish(c, (eccl_result)p->result, p->revision);
        return ECCL_OK;
    }
    s->round = p->round;
    s->revision = p->revision;
    if (p->n_fetch) {
        s->fetch = calloc(p->n_fetch, sizeof *s->fetch);
        s->src = calloc(p->n_src, sizeof *s->src);
        if (!s->fetch || !s->src) {
            s->phase = SY_FETCHING;
            sync_fetch_failed(c, ECCL_ERR_NO_MEMORY);
            return ECCL_OK;
        }
    }
    for (uint32_t i = 0; i < p->n_src; i++) {
        eccl_wire_sync_plan_src(p, i, &s->src[i]);
        if (s->src[i].peer_id == c->peer_id) return ECCL_ERR_PROTOCOL;
    }
    for (uint32_t i = 0; i < p->n_fetch; i++) {
        eccl_wire_sync_fetch f = eccl_wire_sync_plan_fetch(p, i);
        if (f.key >= s->n_keys) return ECCL_ERR_PROTOCOL;
        s->fetch[i] = (sync_fetch){s->key_info[f.key], f.src, f.hash, s->keys[f.key].bytes, 0};
    }
    s->n_fetch = p->n_fetch;
    s->n_src = p->n_src;
    if (s->n_fetch == 0) {
        s->phase = SY_REPORTED; /* up to date: serve until SYNC_DONE, say nothing */
        return ECCL_OK;
    }
    s->phase = SY_FETCHING;
    ECCL_INFO(c->env, "shared state outdated: fetching %u keys from %u peers", s->n_fetch,
              s->n_src);
    /* One link per holder, opened now (lazily: only the holders we need),
     * each carrying the requests for its keys. */
    for (uint32_t k = 0; k < s->n_src; k++) {
        eccl_result rc;
        p2p_link *l = sync_connect(c, k, &rc);
        for (uint32_t i = 0; l && rc == ECCL_OK && i < s->n_fetch; i++) {
            if (s->fetch[i].src != k) continue;
            eccl_msg m = {.type = ECCL_MSG_SYNC_FETCH};
            m.u.sync_fetch.round = s->round;
            m.u.sync_fetch.id = i;
            m.u.sync_fetch.bytes = s->fetch[i].bytes;
            snprintf(m.u.sync_fetch.key, sizeof m.u.sync_fetch.key, "%s",
                     s->state->infos[s->fetch[i].info].key);
            rc = eccl_chan_send_msg(&l->ch, &m);
        }
        if (l && rc == ECCL_OK) rc = eccl_chan_flush(&l->ch);
        if (!l || rc != ECCL_OK) {
            sync_fetch_failed(c, ECCL_ERR_PEER_LOST);
            return ECCL_OK;
        }
    }
    return ECCL_OK;
}

eccl_result comm_sync_on_done(eccl_comm *c, const eccl_msg_sync_result *r)
{
    if (!c->sync.active || r->seq != c->sync.seq) return ECCL_OK; /* stale */
    comm_sync_finish(c, (eccl_result)r->result, r->revision);
    return ECCL_OK;
}

static int sync_key_cmp(const void *a, const void *b)
{
    return strcmp(((const eccl_wire_sync_key *)a)->key, ((const eccl_wire_sync_key *)b)->key);
}

/* A holder's side: a fetcher asks for one key; stream it straight from the
 * tensor. We serve while our call runs (even before our own plan arrives:
 * the round cannot move on without us, and the fetcher verifies the hash). */
eccl_result comm_sync_on_fetch(eccl_comm *c, p2p_link *l, const eccl_msg_sync_fetch *f)
{
    comm_sync *s = &c->sync;
    if (l->sync_fetcher || !s->active || s->phase == SY_DONE) return ECCL_ERR_PROTOCOL;
    if (s->phase != SY_ASKED && f->round != s->round) return ECCL_ERR_PROTOCOL;
    eccl_wire_sync_key probe;
    snprintf(probe.key, sizeof probe.key, "%s", f->key);
    const eccl_wire_sync_key *k = bsearch(&probe, s->keys, s->n_keys, sizeof *s->keys, sync_key_cmp);
    if (!k || k->bytes != f->bytes) return ECCL_ERR_PROTOCOL;
    const uint8_t *data = s->state->infos[s->key_info[k - s->keys]].data;
    uint64_t off = 0;
    do {
        uint64_t len = k->bytes - off < COMM_SYNC_SLICE ? k->bytes - off : COMM_SYNC_SLICE;
        eccl_wire_data d = {.tag = f->id, .epoch = f->round, .phase = ECCL_PHASE_SYNC,
                            .offset = off, .len = (uint32_t)len};
        eccl_result rc = eccl_chan_send_data(&l->ch, &d, data ? data + off : data, NULL);
        if (rc != ECCL_OK) return rc;
        off += len;
    } while (off < k->bytes);
    s->tx += k->bytes;
    s->keys_served++;
    return ECCL_OK;
}

/* A fetcher's side: DATA of fetch d->tag goes straight into the tensor. */
eccl_result comm_sync_on_data(eccl_comm *c, p2p_link *l, const eccl_wire_data *d, void **dst)
{
    comm_sync *s = &c->sync;
    if (!l->sync_fetcher || !s->active || s->phase != SY_FETCHING) return ECCL_ERR_PROTOCOL;
    if (d->phase != ECCL_PHASE_SYNC || d->epoch != s->round || d->tag >= s->n_fetch)
        return ECCL_ERR_PROTOCOL;
    sync_fetch *f = &s->fetch[d->tag];
    /* In order, exactly covering the tensor: TCP keeps order, so anything
     * else is a broken holder. */
    if (f->src != l->sync_src || d->offset != f->got || d->len > f->bytes - f->got ||
        (f->got == f->bytes && f->bytes > 0))
        return ECCL_ERR_PROTOCOL;
    *dst = (uint8_t *)s->state->infos[f->info].data + d->offset;
    return ECCL_OK;
}

eccl_result comm_sync_on_data_done(eccl_comm *c, p2p_link *l, const eccl_wire_data *d)
{
    comm_sync *s = &c->sync;
    (void)l;
    if (s->phase != SY_FETCHING) return ECCL_ERR_PROTOCOL;
    sync_fetch *f = &s->fetch[d->tag];
    f->got += d->len;
    s->rx += d->len;
    if (f->got < f->bytes) return ECCL_OK;
    const eccl_tensor_info *t = &s->state->infos[f->info];
    if (eccl_hash(s->htype, t->data, f->bytes) != f->hash) {
        ECCL_WARN(c->env, "shared-state key '%s' from peer %llu does not hash to the elected hash",
                  t->key, (unsigned long long)l->peer_id);
        sync_fetch_failed(c, ECCL_ERR_PROTOCOL);
        return ECCL_OK;
    }
    if (++s->n_done == s->n_fetch) {
        s->phase = SY_REPORTED;
        sync_report(c, ECCL_OK);
    }
    return ECCL_OK;
}

/* A SYNC link broke. Ours to a holder: the fetch failed. One a fetcher
 * opened to us: its own problem (it reports it). */
void comm_sync_link_lost(eccl_comm *c, p2p_link *l)
{
    if (l->sync_fetcher) sync_fetch_failed(c, ECCL_ERR_PEER_LOST);
}

/* ---- shared state (public) ------------------------------------------------------ */

static int sync_done(void *arg)
{
    eccl_comm *c = arg;
    return c->phase == PHASE_FAILED || c->sync.phase == SY_DONE;
}

/* Checks the caller's tensors and builds the sorted key list we vote with
 * (hashing every voted tensor). Runs without the lock: it touches only the
 * caller's memory. */
static eccl_result sync_prepare(const eccl_shared_state *st, eccl_hash_type ht,
                                eccl_wire_sync_key **keys_out, uint32_t **info_out,
                                uint32_t *n_out)
{
    size_t n = 0;
    for (size_t i = 0; i < st->count; i++) {
        const eccl_tensor_info *t = &st->infos[i];
        size_t len = t->key ? strlen(t->key) : 0;
        size_t es = eccl_dtype_size(t->dtype);
        if (len == 0 || len > ECCL_WIRE_MAX_KEY || es == 0 || t->count > SIZE_MAX / es ||
            (t->count && !t->data))
            return ECCL_ERR_INVALID_ARG;
        n += !t->allow_content_inequality;
    }
    if (n > ECCL_WIRE_MAX_SYNC_KEYS) return ECCL_ERR_INVALID_ARG;
    eccl_wire_sync_key *keys = n ? calloc(n, sizeof *keys) : NULL;
    uint32_t *info = n ? calloc(n, sizeof *info) : NULL;
    if (n && (!keys || !info)) {
        free(keys), free(info);
        return ECCL_ERR_NO_MEMORY;
    }
    uint32_t k = 0;
    for (size_t i = 0; i < st->count; i++) {
        const eccl_tensor_info *t = &st->infos[i];
        if (t->allow_content_inequality) continue;
        snprintf(keys[k].key, sizeof keys[k].key, "%s", t->key);
        keys[k].bytes = (uint64_t)t->count * eccl_dtype_size(t->dtype);
        keys[k].dtype = (uint8_t)t->dtype;
        keys[k].hash = eccl_hash(ht, t->data, (size_t)keys[k].bytes);
        info[k] = (uint32_t)i;
        k++;
    }
    /* Sort keys and their info indices together (insertion into a sorted
     * permutation: n <= 512). */
    uint32_t *perm = n ? malloc(n * sizeof *perm) : NULL;
    eccl_wire_sync_key *sorted = n ? malloc(n * sizeof *sorted) : NULL;
    uint32_t *sinfo = n ? malloc(n * sizeof *sinfo) : NULL;
    if (n && (!perm || !sorted || !sinfo)) {
        free(keys), free(info), free(perm), free(sorted), free(sinfo);
        return ECCL_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;
        while (j > 0 && strcmp(keys[perm[j - 1]].key, keys[i].key) > 0) {
            perm[j] = perm[j - 1];
            j--;
        }
        perm[j] = i;
    }
    eccl_result rc = ECCL_OK;
    for (uint32_t i = 0; i < n; i++) {
        sorted[i] = keys[perm[i]];
        sinfo[i] = info[perm[i]];
        if (i > 0 && strcmp(sorted[i - 1].key, sorted[i].key) == 0) rc = ECCL_ERR_INVALID_ARG;
    }
    /* A "may differ" key must not shadow a voted one either. */
    for (size_t i = 0; rc == ECCL_OK && i < st->count; i++) {
        if (!st->infos[i].allow_content_inequality) continue;
        for (size_t j = 0; j < st->count; j++)
            if (j != i && strcmp(st->infos[i].key, st->infos[j].key) == 0) rc = ECCL_ERR_INVALID_ARG;
    }
    free(keys), free(info), free(perm);
    if (rc != ECCL_OK) {
        free(sorted), free(sinfo);
        return rc;
    }
    *keys_out = sorted;
    *info_out = sinfo;
    *n_out = (uint32_t)n;
    return ECCL_OK;
}

static eccl_result sync_shared_state_host(eccl_comm *c, eccl_shared_state *st,
                                          eccl_sync_strategy strategy, eccl_hash_type ht,
                                          eccl_sync_info *info)
{
    eccl_wire_sync_key *keys = NULL;
    uint32_t *key_info = NULL, n_keys = 0;
    eccl_result rc = sync_prepare(st, ht, &keys, &key_info, &n_keys);
    if (rc != ECCL_OK) return rc;
    eccl_engine_lock(&c->eng);
    rc = comm_usable(c);
    /* One major operation per peer group at a time (DESIGN.md). */
    if (rc == ECCL_OK) comm_ops_settle_returned(c);
    if (rc == ECCL_OK && (c->n_ops > 0 || c->sync.active)) rc = ECCL_ERR_BUSY;
    if (rc != ECCL_OK) {
        eccl_engine_unlock(&c->eng);
        free(keys), free(key_info);
        return rc;
    }
    comm_sync *s = &c->sync;
    uint32_t seq = s->seq + 1;
    memset(s, 0, sizeof *s);
    s->active = 1;
    s->phase = SY_ASKED;
    s->seq = seq;
    s->state = st;
    s->htype = ht;
    s->keys = keys;
    s->key_info = key_info;
    s->n_keys = n_keys;
    eccl_msg m = {.type = ECCL_MSG_SYNC_REQ};
    m.u.sync_req.seq = seq;
    m.u.sync_req.revision = st->revision;
    m.u.sync_req.strategy = (uint8_t)strategy;
    m.u.sync_req.hash_type = (uint8_t)ht;
    m.u.sync_req.n_keys = n_keys;
    m.u.sync_req.keys = keys;
    rc = comm_master_send(c, &m);
    eccl_engine_kick(&c->eng);
    if (rc == ECCL_OK)
        rc = eccl_engine_drive(&c->eng, sync_done, c,
                               now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
    if (c->phase == PHASE_FAILED) {
        rc = c->fatal;
    } else if (s->phase == SY_DONE) {
        rc = s->result;
    } else {
        /* Timed out (or closed): withdraw, so the master ends the round for
         * the others instead of waiting on us. */
        if (rc == ECCL_OK) rc = ECCL_ERR_TIMEOUT;
        sync_report(c, rc);
        comm_sync_finish(c, rc, 0);
    }
    if (rc == ECCL_OK) st->revision = s->revision;
    if (info) {
        info->tx_bytes = s->tx;
        info->rx_bytes = s->rx;
        info->revision = rc == ECCL_OK ? s->revision : st->revision;
        info->keys_fetched = rc == ECCL_OK ? s->n_done : 0;
        info->keys_served = s->keys_served;
    }
    comm_side_links_close(c, ECCL_LINK_SYNC);
    free(s->keys), free(s->key_info), free(s->fetch), free(s->src);
    s->keys = NULL, s->key_info = NULL, s->fetch = NULL, s->src = NULL;
    s->active = 0;
    eccl_engine_unlock(&c->eng);
    return rc;
}

/* Tensors on a device take part through pinned host mirrors (stage.h):
 * hashed, served and fetched there; written back to the device only after
 * the sync succeeded, so a failed sync leaves every device tensor as it was.
 * Host tensors are used in place, as ever. */
eccl_result eccl_comm_sync_shared_state(eccl_comm *c, eccl_shared_state *st,
                                        eccl_sync_strategy strategy, eccl_hash_type ht,
                                        eccl_sync_info *info)
{
    if (!c || !st || (st->count && !st->infos) || (unsigned)strategy > ECCL_SYNC_RECEIVE_ONLY ||
        (ht != ECCL_HASH_SIMPLE && ht != ECCL_HASH_CRC32C))
        return ECCL_ERR_INVALID_ARG;
    if (!eccl_dev_has_devices(c->env) || st->count == 0)
        return sync_shared_state_host(c, st, strategy, ht, info);
    eccl_tensor_info *mirrored = calloc(st->count, sizeof *mirrored);
    eccl_stage *stages = calloc(st->count, sizeof *stages);
    if (!mirrored || !stages) {
        free(mirrored);
        free(stages);
        return ECCL_ERR_NO_MEMORY;
    }
    eccl_result rc = ECCL_OK;
    size_t staged = 0;
    for (; rc == ECCL_OK && staged < st->count; staged++) {
        eccl_tensor_info *t = &mirrored[staged];
        *t = st->infos[staged];
        size_t es = eccl_dtype_size(t->dtype);
        if (!t->data || !es || t->count > SIZE_MAX / es) continue; /* sync_prepare refuses it */
        const void *in = t->data;
        rc = eccl_stage_begin(&stages[staged], c->env, &in, &t->data, t->count * es, NULL);
    }
    if (rc == ECCL_OK) {
        eccl_shared_state shadow = {.revision = st->revision, .count = st->count, .infos = mirrored};
        rc = sync_shared_state_host(c, &shadow, strategy, ht, info);
        st->revision = shadow.revision;
    } else {
        staged--; /* the one that failed holds nothing */
    }
    for (size_t i = 0; i < staged; i++) {
        eccl_result end = eccl_stage_end(&stages[i], rc);
        if (rc == ECCL_OK) rc = end;
    }
    free(mirrored);
    free(stages);
    return rc;
}
