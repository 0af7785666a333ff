/* workload = bench: eccl-bench's rows on the simulated platform.
 *
 * Every rank runs sim_bench.c's program (eccl-bench's calls, in its
 * order) as an actor on its host; the comm's rank 0 keeps the rows, printed
 * after the run in eccl-bench's format (stdout: `#` header lines, then one
 * row per size) and written to bench.tsv. Times are simulated, so the same
 * file and seed print the same bytes. */
#include "sim_sg.h"

typedef struct bench_rank {
    sim *s;
    rank_state *r;
    eccl_simbench_options o;
    eccl_simbench_result res;
    int status; /* eccl_simbench_rank_run's; 1 until it returns */
} bench_rank;

static eccl_result bench_comm_create(void *ctx, const eccl_comm_params *params, eccl_comm **out)
{
    bench_rank *b = ctx;
    eccl_comm_params p = *params;
    p.p2p_host = sg_host_self_get_name();
    return eccl_sg_comm_create_on(b->s->w, NULL, &p, out);
}

static uint64_t bench_now_ns(void *ctx)
{
    (void)ctx;
    return eccl_sg_now_ns();
}

static void bench_sleep_ns(void *ctx, uint64_t ns)
{
    (void)ctx;
    sg_actor_sleep_for((double)ns / 1e9);
}

static eccl_result bench_alloc_phantom(void *ctx, size_t bytes, void **out)
{
    bench_rank *b = ctx;
    return eccl_sg_phantom_alloc(b->s->w, bytes, out);
}

static void bench_rank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    bench_rank *b = sg_actor_self_get_data();
    sim *s = b->s;
    if (b->r->arrive_ns > eccl_sg_now_ns()) sg_actor_sleep_until((double)b->r->arrive_ns / 1e9);
    const eccl_simbench_hooks h = {.ctx = b, .comm_create = bench_comm_create, .now_ns = bench_now_ns,
                                   .sleep_ns = bench_sleep_ns, .alloc_phantom = bench_alloc_phantom};
    b->status = eccl_simbench_rank_run(&h, s->master_addr, &b->o, &b->res);
    if (b->status) /* stderr: stdout is the rows' */
        fprintf(stderr, "eccl-sim: %s (t=%.9f s): bench failed: %s\n", b->r->name,
                (double)eccl_sg_now_ns() / 1e9, b->res.why);
    s->job.done++; /* the master serves until every rank is through */
}

/* The rows, after eccl-bench's column header on the console; bench.tsv's
 * header is eccl_results_bench_open's. */
static void bench_print(FILE *f, const eccl_scenario *c, const bench_rank *b0, int tsv)
{
    if (!tsv) bench_print_columns(f);
    for (int i = 0; b0 && i < b0->res.nrows; i++)
        eccl_simbench_print_row(f, tsv, c->bench_coll, b0->res.nranks, &b0->res.rows[i]);
}

/* summary.tsv of a bench run: the keys eccl-bench --out writes too
 * (results/README.md), so `eccl-results compare` lines the two up, plus
 * the scenario's. */
static int bench_write_summary(const eccl_scenario *cfg, const bench_rank *b0, uint64_t wrong,
                               double busbw_sum, int pass, const char *sim_time, const char *outdir)
{
    FILE *sf = eccl_results_summary_open(outdir);
    if (!sf) return -1;
    const int rows = b0 ? b0->res.nrows : 0;
    eccl_results_kv_str(sf, "tool", "eccl-sim");
    eccl_results_kv_str(sf, "scenario", cfg->name);
    eccl_results_kv_u64(sf, "seed", cfg->seed);
    eccl_results_kv_str(sf, "platform", cfg->platform);
    eccl_results_kv_i64(sf, "ranks", cfg->ranks);
    eccl_results_kv_i64(sf, "ranks_per_host", cfg->ranks_per_host);
    eccl_results_kv_str(sf, "workload", "bench");
    eccl_results_kv_str(sf, "collective", bench_coll_names[cfg->bench_coll]);
    eccl_results_kv_str(sf, "algo", cfg->algo[0] ? cfg->algo : "-");
    eccl_results_kv_str(sf, "transport", cfg->ibv ? "ibv" : "tcp");
    eccl_results_kv_i64(sf, "iters", cfg->iters);
    eccl_results_kv_i64(sf, "warmup", cfg->bench_warmup);
    eccl_results_kv_i64(sf, "rows", rows);
    eccl_results_kv_u64(sf, "wrong", wrong);
    eccl_results_kv_double(sf, "busbw_avg_GBps", rows ? busbw_sum / rows : 0.0);
    eccl_results_kv_str(sf, "checks", pass ? "pass" : "fail");
    /* sim_bench.c's calls: float / sum, out of place, blocking, host buffers. */
    eccl_results_kv_str(sf, "type", "float");
    eccl_results_kv_str(sf, "op", "sum");
    eccl_results_kv_i64(sf, "inplace", 0);
    eccl_results_kv_i64(sf, "inflight", 1);
    eccl_results_kv_i64(sf, "device", 0);
    eccl_results_kv_str(sf, "sim_time_s", sim_time);
    return eccl_results_close(sf);
}

int eccl_scn_sg_bench(sim *s, eccl_scenario *cfg, const char *outdir)
{
    bench_rank *br = calloc((size_t)cfg->ranks, sizeof *br);
    if (!br) {
        fprintf(stderr, "eccl-sim: out of memory\n");
        return 1;
    }
    if (s->verbose)
        eccl_sg_printf("eccl-sim", "scenario=%s seed=%llu platform=%s hosts=%d ranks=%d workload=bench coll=%s "
                       "algo=%s out=%s", cfg->name, (unsigned long long)cfg->seed, cfg->platform, cfg->hosts,
                       cfg->ranks, bench_coll_names[cfg->bench_coll], cfg->algo[0] ? cfg->algo : "-",
                       outdir);
    /* Arrivals as the worker workload's: staggered, plus seeded jitter. */
    uint64_t rng = cfg->seed;
    eccl_scn_sg_start_actor(s->w, "master", "node-0", eccl_scn_sg_master_main, s);
    for (int i = 0; i < cfg->ranks; i++) {
        rank_state *r = &s->job.rk[i];
        bench_rank *b = &br[i];
        eccl_scn_job_rank_init(&s->job, r, i + 1, &rng);
        *b = (bench_rank){.s = s, .r = r, .status = 1};
        b->o = (eccl_simbench_options){.coll = cfg->bench_coll, .minbytes = cfg->bench_minbytes,
                                       .maxbytes = cfg->bench_maxbytes,
                                       .stepfactor = (uint64_t)cfg->bench_stepfactor,
                                       .iters = (uint64_t)cfg->iters, .warmup = (uint64_t)cfg->bench_warmup,
                                       .world = cfg->ranks, .wait_ns = 30ull * 1000000000ull,
                                       .corrupt = r->idx == cfg->bench_corrupt,
                                       .concurrent = (uint64_t)cfg->bench_concurrent,
                                       .phantom = cfg->phantom};
        r->pid = eccl_scn_sg_start_actor(s->w, r->name, r->host, bench_rank_main, b);
    }
    simgrid_run();
    const uint64_t end_ns = eccl_sg_now_ns();

    /* The rows are the comm's rank 0's; every rank must have finished. */
    int failed = 0;
    const bench_rank *b0 = NULL;
    for (int i = 0; i < cfg->ranks; i++) {
        failed += br[i].status != 0;
        if (br[i].status == 0 && br[i].res.rank == 0) b0 = &br[i];
    }
    uint64_t wrong = b0 ? b0->res.wrong_total : 0;
    double busbw_sum = 0;
    for (int i = 0; b0 && i < b0->res.nrows; i++)
        busbw_sum += eccl_simbench_busbw(cfg->bench_coll, b0->res.nranks, &b0->res.rows[i]);
    char end[32];
    eccl_results_fmt_time(end, sizeof end, end_ns);
    printf("# eccl-sim bench: scenario %s seed %llu platform %s ranks %d ranks_per_host %d coll %s algo %s "
           "transport %s\n",
           cfg->name, (unsigned long long)cfg->seed, cfg->platform, cfg->ranks, cfg->ranks_per_host,
           bench_coll_names[cfg->bench_coll], cfg->algo[0] ? cfg->algo : "-", cfg->ibv ? "ibv" : "tcp");
    printf("# eccl-bench: nranks %d dtype float op sum inplace 0 iters %d warmup %d check %d inflight %d "
           "device 0 coll %s\n",
           cfg->ranks, cfg->iters, cfg->bench_warmup, !cfg->phantom, cfg->bench_concurrent,
           bench_coll_names[cfg->bench_coll]);
    if (b0) bench_print(stdout, cfg, b0, 0);
    printf("# Out of bounds values : %llu %s\n", (unsigned long long)wrong, wrong == 0 ? "OK" : "FAILED");
    printf("# Avg bus bandwidth    : %g\n", b0 && b0->res.nrows ? busbw_sum / b0->res.nrows : 0.0);
    printf("# simulated time %s s, ranks failed %d, out %s\n", end, failed, outdir);
    printf("#\n");

    int io_err = 0;
    FILE *f = eccl_results_bench_open(outdir);
    if (f) {
        bench_print(f, cfg, b0, 1);
        io_err = eccl_results_close(f) != 0;
    } else {
        io_err = 1;
    }
    const int pass = !failed && b0 && !wrong;
    io_err |= bench_write_summary(cfg, b0, wrong, busbw_sum, pass, end, outdir) != 0;
    char who[128], title[512];
    snprintf(who, sizeof who, "eccl-sim for scenario %s (workload = bench)", cfg->name);
    snprintf(title, sizeof title, "%s: %s on %d ranks (%s, algo %s), simulated", cfg->name,
             bench_coll_names[cfg->bench_coll], cfg->ranks, cfg->platform, cfg->algo[0] ? cfg->algo : "-");
    io_err |= eccl_results_bench_plot(outdir, who, title) != 0;
    const char *plot = io_err ? "none" : eccl_results_plot_png(outdir, &io_err);
    if (s->verbose) eccl_sg_printf("eccl-sim", "plot=%s", plot);
    if (failed) fprintf(stderr, "eccl-sim: %d of %d ranks failed (see above)\n", failed, cfg->ranks);
    if (wrong) fprintf(stderr, "eccl-sim: %llu wrong elements\n", (unsigned long long)wrong);
    free(br);
    return pass && !io_err ? 0 : 1;
}

