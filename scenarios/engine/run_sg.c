/* The SimGrid runner of a scenario: the simulated world set up from the
 * scenario, the run state, events and progress, the actors (master, relays,
 * workers, killers), the faults applied as the plan fires them. The
 * workloads (job_sg.c, diloco_sg.c, nccl2_sg.c, bench_sg.c) start their
 * actors here and judge the outcome themselves.
 */
#include "sim_sg.h"
#include "actor_stacks.h"
#include "diloco.h"

/* ---- events and progress ------------------------------------------------- */

/* mallinfo2 walks every free chunk malloc holds, which a 96K-rank heap has
 * millions of: at every 64th event it was 88% of such a run. So a fixed
 * number of samples whatever the size: every ranks / 2 events, some 16 in
 * a run of 3 all-reduces (about 8 events a rank). */
static size_t heap_sample_every(const sim *s)
{
    return s->cfg->ranks > 128 ? (size_t)s->cfg->ranks / 2 : 64;
}

static void sample_heap(sim *s)
{
    struct mallinfo2 mi = mallinfo2();
    if (mi.uordblks > s->heap_peak) s->heap_peak = mi.uordblks;
    if (mi.hblkhd > s->mmap_peak) s->mmap_peak = mi.hblkhd;
}

/* The job's log lines, stamped with the simulated time. */
static void sg_say(void *ctx, const char *who, const char *line)
{
    (void)ctx;
    eccl_sg_printf(who, "%s", line);
}

/* The job's hook after each event: the heap, sampled. */
static void sg_event_added(void *ctx, size_t nev)
{
    sim *s = ctx;
    if (nev % heap_sample_every(s) == 0) sample_heap(s);
}

void eccl_scn_sg_add_event(sim *s, int rank, const char *event, int iter, int world, const char *ms,
                           const char *hash)
{
    eccl_scn_job_add_event(&s->job, eccl_sg_now_ns(), rank, event, iter, world, ms, hash);
}

/* ---- fault injection ----------------------------------------------------- */

aid_t eccl_scn_sg_start_actor(eccl_sg_world *w, const char *name, const char *host, xbt_main_func_t fn, void *data)
{
    sg_actor_t a = sg_actor_init(name, eccl_sg_world_host(w, host));
    const aid_t pid = sg_actor_get_pid(a);
    sg_actor_set_data(a, data);
    sg_actor_start(a, fn, 0, NULL);
    return pid;
}

/* kill: a crash of the rank's process. With one rank per host, the host
 * crashes with it (as it always did: a host_on may bring it back); with
 * several, only the process: its conns reset, its listeners refuse, its
 * actors die, the host and its other ranks go on. */
static void kill_rank(sim *s, rank_state *r)
{
    if (s->cfg->ranks_per_host == 1) {
        eccl_sg_printf("eccl-sim", "kill rank=%d host=%s", r->idx, r->host);
        eccl_sg_world_kill_host(s->w, r->host);
    } else {
        eccl_sg_printf("eccl-sim", "kill rank=%d host=%s (its process; the host stays on)",
                       r->idx, r->host);
        if (r->running) eccl_sg_world_kill_process(s->w, r->pid);
    }
    eccl_scn_job_host_off(r, eccl_sg_now_ns(), "killed");
}

typedef struct killer_arg {
    rank_state *victim;
    uint64_t at_ns;
} killer_arg;

static void killer_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    killer_arg *ka = sg_actor_self_get_data();
    rank_state *v = ka->victim;
    sim *s = rank_sim(v);
    sg_actor_sleep_until((double)ka->at_ns / 1e9);
    kill_rank(s, v);
    free(ka);
}

/* The job's arm_kill hook: a killer actor for kill @ iter. */
static void sg_arm_kill(void *ctx, rank_state *v, uint64_t at_ns) { eccl_scn_sg_kill_rank_at(ctx, v, at_ns); }

void eccl_scn_sg_kill_rank_at(sim *s, rank_state *v, uint64_t at_ns)
{
    killer_arg *ka = malloc(sizeof *ka);
    if (!ka) {
        s->job.oom = 1;
        return;
    }
    ka->victim = v;
    ka->at_ns = at_ns;
    char name[32];
    snprintf(name, sizeof name, "killer%d", v->idx);
    eccl_scn_sg_start_actor(s->w, name, "node-0", killer_main, ka);
}

static void rank_main(int argc, char **argv);
static void relay_main(int argc, char **argv);
static void relay_faults_main(int argc, char **argv);

/* A relay actor's data. */
typedef struct relay_arg {
    sim *s;
    int k;
} relay_arg;



/* relays = K: relay k on the host of the first rank of its share, which
 * its ranks reach first (the master next); relays above them
 * (relay_fanout) on the host of their first leaf's, on a port of their
 * level's. Parents start before their children. -1: out of memory. */
int eccl_scn_sg_start_relays(sim *s)
{
    const eccl_scenario *c = s->cfg;
    if (!c->relays) return 0;
    const int total = eccl_scn_relay_count(c);
    s->relay_share = (c->ranks + c->relays - 1) / c->relays;
    s->relay_addr = calloc((size_t)total, sizeof *s->relay_addr);
    s->relay_pid = calloc((size_t)total, sizeof *s->relay_pid);
    relay_arg *args = s->relay_args = calloc((size_t)total, sizeof *args);
    if (!s->relay_addr || !s->relay_pid || !args) return -1;
    /* A relay runs on a host of its share (the first rank's: the same rack
     * as most of its ranks), except under the diloco churn, which crashes
     * ranks' hosts at random: there it takes a spare host (checked). */
    const int spare0 = 1 + eccl_scn_rank_host(c, c->ranks);
    const int spare = c->diloco;
    for (int k = total - 1; k >= 0; k--) {
        char host[24];
        int level;
        const int leaf = eccl_scn_relay_first_leaf(c, k, &level);
        if (spare) {
            snprintf(host, sizeof host, "node-%d", spare0 + k);
        } else {
            const int r0 = leaf * s->relay_share;
            const rank_state *first = &s->job.rk[r0 < c->ranks ? r0 : c->ranks - 1];
            snprintf(host, sizeof host, "%s", first->host);
        }
        snprintf(s->relay_addr[k], sizeof s->relay_addr[k], "%s:%d", host, RELAY_PORT + level);
        args[k] = (relay_arg){s, k};
        char name[32];
        snprintf(name, sizeof name, "relay-%d", k + 1);
        s->relay_pid[k] = eccl_scn_sg_start_actor(s->w, name, host, relay_main, &args[k]);
        s->relays_live++;
    }
    if (c->n_relay_kills) eccl_scn_sg_start_actor(s->w, "relay-faults", "node-0", relay_faults_main, s);
    return 0;
}

/* A new worker on the rank's host, as a new process would start: fresh
 * communicator, admitted by the running peers' vote. */
void eccl_scn_sg_start_worker(rank_state *r, uint64_t at_ns, int start_world)
{
    eccl_scn_job_worker_starts(r, at_ns, start_world);
    r->pid = eccl_scn_sg_start_actor(rank_sim(r)->w, r->name, r->host, rank_main, r);
}

static void apply_fault(sim *s, int idx)
{
    const eccl_scn_fault *f = &s->cfg->faults[idx];
    const fault_links *fl = &s->flinks[idx];
    rank_state *r = f->rank > 0 ? &s->job.rk[f->rank - 1] : NULL;
    eccl_result rc = ECCL_OK;
    switch (f->kind) {
    case F_KILL:
        kill_rank(s, r);
        break;
    case F_HOST_OFF:
    case F_HOST_ON: {
        /* The whole host: every rank on it, in rank order. */
        int first, last;
        eccl_scn_host_ranks(s->cfg, eccl_scn_rank_host(s->cfg, r->idx), &first, &last);
        char ranks[48] = "";
        if (s->cfg->ranks_per_host > 1) snprintf(ranks, sizeof ranks, " ranks=%d-%d", first, last);
        if (f->kind == F_HOST_OFF) {
            eccl_sg_printf("eccl-sim", "host_off rank=%d host=%s%s (silent)", r->idx, r->host,
                           ranks);
            rc = eccl_sg_world_host_off(s->w, r->host);
            for (int q = first; q <= last; q++) eccl_scn_job_host_off(&s->job.rk[q - 1], eccl_sg_now_ns(), "host_off");
        } else {
            eccl_sg_printf("eccl-sim", "host_on rank=%d host=%s%s: a new worker starts%s",
                           r->idx, r->host, ranks, first < last ? " for each" : "");
            rc = eccl_sg_world_host_on(s->w, r->host);
            for (int q = first; q <= last; q++) {
                eccl_scn_sg_add_event(s, q, "host_on", -1, -1, NULL, NULL);
                eccl_scn_sg_start_worker(&s->job.rk[q - 1], eccl_sg_now_ns(), 0);
            }
        }
        break;
    }
    case F_LINK_OFF:
    case F_LINK_ON:
        for (int i = 0; i < fl->n && rc == ECCL_OK; i++)
            rc = eccl_sg_world_set_link(s->w, fl->l[i], f->kind == F_LINK_ON);
        eccl_sg_printf("eccl-sim", "%s %s%s (%d links)", f->kind == F_LINK_ON ? "link_on" : "link_off",
                       f->links[0], f->nlinks > 1 ? ",..." : "", fl->n);
        eccl_scn_sg_add_event(s, 0, f->kind == F_LINK_ON ? "link_on" : "link_off", -1, -1, NULL, NULL);
        if (f->kind == F_LINK_OFF) eccl_scn_job_fault(&s->job, eccl_sg_now_ns());
        break;
    case F_SLOW:
        for (int i = 0; i < fl->n; i++) {
            double bw = sg_link_get_bandwidth(fl->l[i]), lat = sg_link_get_latency(fl->l[i]);
            if (f->factor > 0) {
                bw /= f->factor;
                lat *= f->factor;
            }
            if (f->bw_Bps > 0) bw = f->bw_Bps;
            if (f->have_lat) lat = f->lat_s;
            sg_link_set_bandwidth(fl->l[i], bw);
            sg_link_set_latency(fl->l[i], lat);
        }
        eccl_sg_printf("eccl-sim", "slow_link %s%s (%d links)", f->links[0],
                       f->nlinks > 1 ? ",..." : "", fl->n);
        eccl_scn_sg_add_event(s, 0, "slow_link", -1, -1, NULL, NULL);
        if (s->job.slow_ns == UINT64_MAX) s->job.slow_ns = eccl_sg_now_ns();
        break;
    case F_JOIN:
        break; /* not timed here: the rank's first worker arrives then */
    }
    if (rc != ECCL_OK) {
        eccl_sg_printf("eccl-sim", "FAIL %s: %s", eccl_scn_fault_name(f->kind), eccl_strerror(rc));
        s->job.oom = 1;
    }
}

/* Fires the timed faults in plan order (time, then file order), from one
 * actor, so that faults at the same instant apply in a fixed order. */
void eccl_scn_sg_plan_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    for (int k = 0; k < s->norder; k++) {
        sg_actor_sleep_until((double)s->cfg->faults[s->order[k]].at_ns / 1e9);
        apply_fault(s, s->order[k]);
    }
}

/* ---- the sim launch ------------------------------------------------------ */

/* The loop's key=value lines: recorded as events, echoed with --verbose. */
static void sim_print(void *ctx, int to_stderr, const char *line)
{
    rank_state *r = ctx;
    if (to_stderr || rank_sim(r)->verbose) eccl_sg_printf(r->name, "%s%s", to_stderr ? "stderr: " : "", line);
    if (!to_stderr) eccl_scn_job_line(r, eccl_sg_now_ns(), line);
}

/* ---- actors -------------------------------------------------------------- */

/* Until every rank is done (diloco: until the churn is over and no worker
 * lives): the coordinators serve until then. */
static int job_running(const sim *s)
{
    return s->cfg->diloco ? !((!s->dl || s->dl->live == 0) && s->churn_done) : s->job.done < s->cfg->ranks;
}

void eccl_scn_sg_master_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    eccl_master *m = NULL;
    eccl_result rc = eccl_sg_master_create(s->w, s->master_addr, &m);
    if (rc == ECCL_OK) rc = eccl_master_run(m);
    if (rc != ECCL_OK) {
        eccl_sg_printf("master", "FAIL master start: %s", eccl_strerror(rc));
        eccl_master_destroy(m);
        s->job.oom = 1;
        return;
    }
    /* Until every rank is done (diloco: until the churn is over and no
     * worker lives). */
    while (job_running(s) || s->relays_live > 0) sg_actor_sleep_for(0.001);
    eccl_master_destroy(m);
}

/* However a relay actor ends (its run is over, kill_relay, its host's
 * kill): the master goes on until none is left, so no relay outlives it. */
static void relay_exited(int failed, void *data)
{
    (void)failed;
    ((sim *)data)->relays_live--;
}

static void relay_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    relay_arg *a = sg_actor_self_get_data();
    sim *s = a->s;
    sg_actor_on_exit(relay_exited, s);
    eccl_relay *relay = NULL;
    const int parent = eccl_scn_relay_parent(s->cfg, a->k);
    eccl_result rc = eccl_sg_relay_create(s->w, s->relay_addr[a->k],
                                          parent < 0 ? s->master_addr : s->relay_addr[parent], &relay);
    if (rc == ECCL_OK) rc = eccl_relay_run(relay);
    if (rc != ECCL_OK) {
        eccl_sg_printf("relay", "FAIL relay %d start: %s", a->k + 1, eccl_strerror(rc));
        eccl_relay_destroy(relay);
        s->job.oom = 1;
        return;
    }
    /* Until every rank is done: coarse, one timer per relay. */
    while (job_running(s)) sg_actor_sleep_for(0.01);
    eccl_relay_destroy(relay);
}

/* Fires the kill_relay lines in time order (file order at one instant). */
static void relay_faults_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    const eccl_scenario *c = s->cfg;
    int done[MAX_RELAY_KILLS] = {0};
    for (int n = 0; n < c->n_relay_kills; n++) {
        int next = -1;
        for (int i = 0; i < c->n_relay_kills; i++)
            if (!done[i] && (next < 0 || c->relay_kills[i].at_ns < c->relay_kills[next].at_ns))
                next = i;
        done[next] = 1;
        sg_actor_sleep_until((double)c->relay_kills[next].at_ns / 1e9);
        int k = c->relay_kills[next].relay - 1;
        eccl_sg_printf("eccl-sim", "kill_relay relay=%d at=%s: its ranks rejoin through the master",
                       k + 1, s->relay_addr[k]);
        eccl_scn_sg_add_event(s, 0, "kill_relay", -1, -1, NULL, NULL);
        eccl_scn_job_fault(&s->job, eccl_sg_now_ns());
        eccl_sg_world_kill_process(s->w, s->relay_pid[k]);
    }
}

/* A rank's master_addr: behind a relay, it first and the master next (a
 * dead relay's ranks rejoin through the master). */
void eccl_scn_sg_rank_master(const sim *s, const rank_state *r, char *buf, size_t len)
{
    if (s->cfg->relays)
        snprintf(buf, len, "%s,%s", s->relay_addr[(r->idx - 1) / s->relay_share], s->master_addr);
    else
        snprintf(buf, len, "%s", s->master_addr);
}

static void rank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    rank_state *r = sg_actor_self_get_data();
    sim *s = rank_sim(r);
    /* Not when it is due now (a host_on): SimGrid would round a sleep of
     * less than its precision up to 1 ns, and say so. */
    if (r->arrive_ns > eccl_sg_now_ns()) sg_actor_sleep_until((double)r->arrive_ns / 1e9);
    eccl_scn_job_worker_arrived(r);
    eccl_worker_sg sim_launch;
    eccl_worker_sg_init(&sim_launch, s->w, sim_print, r);
    const eccl_launch launch = sim_launch.launch;
    /* eccl-worker --master node-0:5000 --count C --iters I --start-world N */
    char master[2 * ECCL_ADDR_MAX + 1];
    eccl_scn_sg_rank_master(s, r, master, sizeof master);
    const eccl_worker_options o = {
        .master = master,
        .rejoins = s->cfg->relays ? 1 : 0,
        .count = (size_t)s->cfg->count,
        .iters = s->cfg->iters,
        .world_min = s->cfg->world_min,
        .start_world = r->start_world,
        .group = 0,
        .wait_ms = 30000,
        .step_ms = (int)llround(s->cfg->step_s * 1e3),
        .peer_timeout_ms = (uint32_t)llround(s->cfg->peer_timeout_s * 1e3),
        .optimize_at = s->cfg->optimize_at,
        .op_timeout_ms = (uint32_t)llround(s->cfg->op_timeout_s * 1e3),
        .stall_at = r->idx == s->cfg->stall_rank ? s->cfg->stall_iter : 0,
        .stall_ms = r->idx == s->cfg->stall_rank ? s->cfg->stall_ms : 0,
    };
    r->status = eccl_worker_run(&launch, &o);
    r->returned = 1;
    eccl_scn_job_worker_ended(r);
}



/* Everything a run holds, once its summary is out. */
void eccl_scn_sg_free(sim *s, eccl_scenario *cfg)
{
    eccl_sg_world_destroy(s->w);
    eccl_scn_job_free(&s->job);
    free(s->flinks);
    free(s->order);
    free(s->relay_addr);
    free(s->relay_pid);
    free(s->relay_args);
    free(s);
    eccl_scn_free(cfg);
    fflush(stdout);
}


void eccl_scn_sg_write_transport(FILE *sf, const sim *s, const eccl_scenario *cfg)
{
    if (!cfg->ibv) return;
    eccl_results_kv_str(sf, "transport", "ibv");
    eccl_results_kv_u64(sf, "rdma_writes", eccl_sg_world_rdma_writes(s->w));
}

/* Actor stacks. Core's deepest call chain is under 4 KiB (no control
 * message on the stack is bigger than 256 bytes), so 256 KiB instead of
 * SimGrid's 8 MiB leaves ample room for libc and SimGrid. What costs is not
 * the size but the memory maps: a stack with a guard page is 2, and Linux
 * allows vm.max_map_count (65,530 by default) per process, which with 3
 * actors per rank (worker, progress, receiver) stops at about 10,900
 * ranks. Beyond what the limit allows, stacks go without guard pages, as
 * slices of one region (actor_stacks.h): an overflow is then no longer
 * caught, which the margin above makes a remote risk; eccl-sim says so when
 * it happens. */
#define ACTOR_STACK_KIB 256
#define MAP_MARGIN 4096 /* maps for everything else: libraries, heap, SimGrid */

static void set_actor_stacks(const eccl_scenario *c)
{
    sg_cfg_set_int("contexts/stack-size", ACTOR_STACK_KIB);
    long limit = 0;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f) {
        if (fscanf(f, "%ld", &limit) != 1) limit = 0;
        fclose(f);
    }
    /* Every worker life is 3 actors, less its progress thread and its
     * receiver when it has none (a host_on restarts its host's ranks); the
     * master 2; killers and the plan 1. */
    long actors = (1L + c->progress_thread + !c->latency_net) * (c->ranks + (long)c->nfaults * c->ranks_per_host) + 2 + c->nfaults + 1;
    if (limit > 0 && 2 * actors + MAP_MARGIN > limit) {
        sg_cfg_set_int("contexts/guard-size", 0);
        /* Without a guard, SimGrid callocs each stack, which the pool serves
         * with 2 resident pages fewer each (at 96K ranks 0.8 GB). Past the
         * pool, or without it, malloc does: glibc raises its mmap threshold
         * past a freed mmapped chunk, and a calloc from the heap clears the
         * whole stack (32k ranks touched 11 GB of zeros). A fixed threshold
         * keeps every stack a fresh, untouched mapping (and the kernel merges
         * adjacent ones, so they cost few maps). glibc also caps its mmapped
         * chunks at 65536 and serves the rest from the heap, cleared: lift
         * the cap, or 32k ranks and up pay 256 KiB of zeros per actor past
         * the 65,536th. */
        mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        mallopt(M_MMAP_MAX, INT_MAX);
        const int pooled = eccl_actor_stacks_reserve((size_t)ACTOR_STACK_KIB * 1024, (size_t)actors) == 0;
        eccl_sg_printf("eccl-sim", "actor stacks without guard pages%s: %ld actors need %ld maps "
                       "with them, vm.max_map_count is %ld", pooled ? ", from one region" : "", actors,
                       2 * actors + MAP_MARGIN, limit);
    }
}


/* workload = bench on phantom buffers: address space for every rank's
 * input and `concurrent` outputs of maxbytes, so that no two get the same
 * address (an output equal to the input would make a call in place), plus
 * the default 4 GiB for the library's own staging; 0 otherwise (the
 * default region). Address space only: nothing is mapped in. */
static size_t bench_phantom_region(const eccl_scenario *cfg)
{
    if (!cfg->bench || !cfg->phantom) return 0;
    const size_t per_buf = (cfg->bench_maxbytes + 4095) / 4096 * 4096;
    return (size_t)cfg->ranks * (size_t)(1 + cfg->bench_concurrent) * per_buf + ((size_t)4 << 30);
}

int eccl_scn_sg_run(eccl_scenario *cfg, const char *file, const char *outdir, const char *platform_path,
                    int log_level, int verbose)
{
    /* SimGrid's configuration chatter goes, its warnings stay. */
    xbt_log_control_set("xbt_cfg.thres:warning");
    /* CM02: a message costs exactly latency + size / bandwidth. */
    sg_cfg_set_string("network/model", "CM02");
    /* tcp_window: CM02 bounds every flow by TCP-gamma / (2 x its route's
     * latency), window / RTT; net_sg paces each stream to the same rate
     * (eccl_sg_world_set_tcp_window), since a stream is many messages.
     * Unset, SimGrid's default gamma stays, as before the key existed. */
    if (cfg->tcp_window > 0) sg_cfg_set_double("network/TCP-gamma", cfg->tcp_window);
    set_actor_stacks(cfg);
    simgrid_load_platform(platform_path);
    /* Seal it now (SimGrid does on the first run): a Floyd zone (clos,
     * wan) computes its routes when sealed, and the fault plan asks for
     * routes before the job runs. Nothing runs until 0 s. */
    simgrid_run_until(0.0);


    sim *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->cfg = cfg;
    s->verbose = verbose;
    s->master_addr = "node-0:5000";
    const eccl_scn_job_hooks hooks = {.ctx = s, .say = sg_say, .arm_kill = sg_arm_kill,
                                      .event_added = sg_event_added};
    s->flinks = calloc((size_t)cfg->nfaults + 1, sizeof *s->flinks);
    if (eccl_scn_job_init(&s->job, cfg, "eccl-sim", &hooks) || !s->flinks ||
        eccl_sg_world_create(log_level, &s->w) != ECCL_OK) {
        fprintf(stderr, "eccl-sim: out of memory\n");
        return 1;
    }
    const eccl_sg_dev_cfg dev = {.phantom = cfg->phantom, .reduce_Bps = cfg->reduce_rate_Bps,
                                 .copy_Bps = cfg->copy_rate_Bps, .devices = cfg->cuda,
                                 .dev_copy_Bps = cfg->dev_copy_Bps,
                                 .dev_copy_latency_s = cfg->dev_copy_latency_s,
                                 .resident_min = cfg->device_ring ? (size_t)1 << 20 : 0,
                                 .phantom_region = bench_phantom_region(cfg)};
    const eccl_sg_net_cfg net = {.ibv = cfg->ibv,
                                 .qps = (unsigned)cfg->ib_qps,
                                 .min_bytes = (size_t)cfg->ib_min_bytes,
                                 .chunk_bytes = (size_t)cfg->ib_chunk_bytes};
    if (eccl_sg_world_set_net(s->w, &net) != ECCL_OK) {
        fprintf(stderr, "eccl-sim: transport = ibv: this eccl-sim was built without "
                        "<infiniband/verbs.h>\n");
        return 2;
    }
    if (eccl_sg_world_set_dev(s->w, &dev) != ECCL_OK ||
        eccl_sg_world_set_master_msg_cost(s->w, cfg->master_msg_cost_s) != ECCL_OK) {
        fprintf(stderr, "eccl-sim: cannot set up the %s device\n", eccl_scn_buffers_name(cfg));
        return 1;
    }
    eccl_sg_world_set_progress_thread(s->w, cfg->progress_thread);
    eccl_sg_world_set_tcp_window(s->w, cfg->tcp_window);
    if (eccl_sg_world_set_p2p_pool(s->w, (unsigned)cfg->pool) != ECCL_OK) {
        fprintf(stderr, "eccl-sim: pool: cannot set %d\n", cfg->pool);
        eccl_scn_sg_free(s, cfg);
        return 2;
    }
    if (cfg->algo[0] && eccl_sg_world_set_algo(s->w, cfg->algo) != ECCL_OK) {
        fprintf(stderr, "eccl-sim: algo: cannot set \"%s\"\n", cfg->algo);
        eccl_scn_sg_free(s, cfg);
        return 2;
    }
    if (eccl_sg_world_set_net_model(s->w, cfg->latency_net ? ECCL_SG_NET_LATENCY : ECCL_SG_NET_FLOW) !=
        ECCL_OK) {
        fprintf(stderr, "eccl-sim: cannot set the net model\n");
        return 1;
    }
    eccl_sg_world_set_flow_min_bytes(s->w, cfg->flow_min_bytes);
    eccl_sg_world_set_shm(s->w, cfg->shm_bandwidth_Bps);
    eccl_sg_world_set_tls(s->w, cfg->tls_Bps);

    if (cfg->diloco) {
        int status = eccl_scn_sg_diloco(s, cfg, outdir);
        eccl_scn_sg_free(s, cfg);
        return status;
    }
    if (cfg->bench) {
        int status = eccl_scn_sg_bench(s, cfg, outdir);
        eccl_scn_sg_free(s, cfg);
        return status;
    }
    if (cfg->nccl2) {
        int status = eccl_scn_sg_nccl2(s, cfg, outdir);
        eccl_scn_sg_free(s, cfg);
        return status;
    }
    return eccl_scn_sg_job(s, cfg, file, outdir);
}
