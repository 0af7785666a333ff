/* mpi_ulfm: an iterative job that survives lost ranks the ULFM way
 * (MPI_ERRORS_RETURN, MPIX_Comm_agree, MPIX_Comm_failure_ack,
 * MPIX_Comm_shrink), with exact results.
 *
 *   eccl-run --keep-going -np N mpi_ulfm [-i] [-r] ITERS [RANK@ITER | RANK~MICROSECONDS ...]
 *
 * Each RANK@ITER makes MPI_COMM_WORLD's rank RANK kill itself (SIGKILL,
 * no goodbye) as iteration ITER begins; each RANK~US makes it die US
 * microseconds after MPI_Init, wherever it is then (inside any call,
 * between them, in MPIX_Comm_agree or shrink).
 *
 * An iteration is a step: a message round on a duplicate of the job's
 * communicator (MPI_Sendrecv of the world rank to the next rank, from the
 * previous one; a loss leaves the duplicate numbered by the old ring, so
 * messages posted on it after the loss must fail, not wait or go astray),
 * then on the communicator an MPI_Allreduce of every live rank's
 * contribution (world rank + 1) * (iteration + 1), an MPI_Bcast from its
 * rank 0, an MPI_Allgather of the world ranks, an MPI_Alltoall, an
 * MPI_Reduce_scatter_block, an MPI_Scan (computed in the library from an
 * all-gather) and an MPI_Barrier. With -i they are nonblocking (MPI_Isend,
 * MPI_Irecv and the MPI_I forms; no scan), all in flight at once, then
 * MPI_Waitall. With -r a survivor whose step failed first revokes the
 * communicator and its duplicate (MPIX_Comm_revoke: the others' calls on
 * them end at once, MPIX_ERR_REVOKED), as ULFM programs do, so that
 * every survivor shrinks. The survivors agree on whether the step succeeded
 * everywhere (MPIX_Comm_agree); if not, they acknowledge the failure,
 * check what they know of it (MPIX_Comm_failure_get_acked and
 * MPIX_Comm_get_failed name, in MPI_COMM_WORLD's ranks, only victims,
 * every RANK@ITER victim of the communicator dead by then, the
 * acknowledged ones first; MPIX_Comm_ack_failed counts them), shrink the
 * communicator to the survivors and run the step again.
 *
 * Each agreed step is checked exactly against the ranks its all-gather
 * names, which must be in order, include every rank that never dies, and,
 * for the RANK@ITER victims, name exactly those alive at that iteration. A
 * survivor prints nothing unless a check fails; the first rank of the last
 * communicator prints the verdict. Exit status 0 on a survivor that saw
 * every check pass.
 */
#include <mpi.h>
#include <mpi-ext.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#define MAX_VICTIMS 16

static int world_rank, world_size, n_victims, victim[MAX_VICTIMS], dies_at[MAX_VICTIMS], nonblocking, revoking;
static int timed[MAX_VICTIMS]; /* dies_at is microseconds after MPI_Init */

/* 1: alive at iteration it; 0: dead; -1: a timed victim, either. */
static int alive_at(int r, int it)
{
    for (int v = 0; v < n_victims; v++)
        if (victim[v] == r && (timed[v] || dies_at[v] <= it))
            return timed[v] ? -1 : 0;
    return 1;
}

static void die(int sig)
{
    (void)sig;
    raise(SIGKILL);
}

/* What a step's calls return on this rank. */
struct results {
    long long sum;     /* MPI_Allreduce of (world rank + 1) * (iteration + 1) */
    int word;          /* MPI_Bcast of rank 0's 7 * iteration */
    int ranks[64], n;  /* MPI_Allgather of the world ranks, in the communicator's order */
    int left;          /* the message from the previous rank: its world rank */
    int a2a[64];       /* MPI_Alltoall: rank i sent us its world rank * 64 + our rank */
    long long rsb;     /* MPI_Reduce_scatter_block: our block of (world rank + 1) * (j + 1) */
    long long scan;    /* MPI_Scan of world rank + 1 (blocking steps only) */
};

/* One step; the first error of its calls, or MPI_SUCCESS. It begins with a
 * message round on twin, comm's duplicate: each rank sends its world rank
 * to the next rank and receives the previous one's. */
static int step(MPI_Comm comm, MPI_Comm twin, int it, struct results *out)
{
    long long mine = (long long)(world_rank + 1) * (it + 1), rs_in[64], one = world_rank + 1;
    int size, me, rc, a2a_in[64];

    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &me);
    out->n = size;
    out->word = me == 0 ? 7 * it : -1;
    out->left = -1;
    for (int j = 0; j < size; j++) {
        a2a_in[j] = world_rank * 64 + j;
        rs_in[j] = (long long)(world_rank + 1) * (j + 1);
    }
    if (nonblocking) {
        /* All in flight at once: a loss may cut any of them short. */
        MPI_Request req[8];
        int e[8];
        e[0] = MPI_Irecv(&out->left, 1, MPI_INT, (me + size - 1) % size, 5, twin, &req[0]);
        e[1] = MPI_Isend(&world_rank, 1, MPI_INT, (me + 1) % size, 5, twin, &req[1]);
        e[2] = MPI_Iallreduce(&mine, &out->sum, 1, MPI_LONG_LONG, MPI_SUM, comm, &req[2]);
        e[3] = MPI_Ibcast(&out->word, 1, MPI_INT, 0, comm, &req[3]);
        e[4] = MPI_Iallgather(&world_rank, 1, MPI_INT, out->ranks, 1, MPI_INT, comm, &req[4]);
        e[5] = MPI_Ialltoall(a2a_in, 1, MPI_INT, out->a2a, 1, MPI_INT, comm, &req[5]);
        e[6] = MPI_Ireduce_scatter_block(rs_in, &out->rsb, 1, MPI_LONG_LONG, MPI_SUM, comm, &req[6]);
        e[7] = MPI_Ibarrier(comm, &req[7]);
        rc = MPI_Waitall(8, req, MPI_STATUSES_IGNORE);
        for (int i = 0; i < 8; i++)
            if (e[i] != MPI_SUCCESS)
                return e[i];
        return rc;
    }
    if ((rc = MPI_Sendrecv(&world_rank, 1, MPI_INT, (me + 1) % size, 5, &out->left, 1, MPI_INT,
                           (me + size - 1) % size, 5, twin, MPI_STATUS_IGNORE)) != MPI_SUCCESS ||
        (rc = MPI_Allreduce(&mine, &out->sum, 1, MPI_LONG_LONG, MPI_SUM, comm)) != MPI_SUCCESS ||
        (rc = MPI_Bcast(&out->word, 1, MPI_INT, 0, comm)) != MPI_SUCCESS ||
        (rc = MPI_Allgather(&world_rank, 1, MPI_INT, out->ranks, 1, MPI_INT, comm)) != MPI_SUCCESS ||
        (rc = MPI_Alltoall(a2a_in, 1, MPI_INT, out->a2a, 1, MPI_INT, comm)) != MPI_SUCCESS ||
        (rc = MPI_Reduce_scatter_block(rs_in, &out->rsb, 1, MPI_LONG_LONG, MPI_SUM, comm)) != MPI_SUCCESS ||
        (rc = MPI_Scan(&one, &out->scan, 1, MPI_LONG_LONG, MPI_SUM, comm)) != MPI_SUCCESS)
        return rc;
    return MPI_Barrier(comm);
}

/* The world ranks of group g's processes into out (at most 64); their number. */
static int world_ranks_of(MPI_Group g, int *out)
{
    MPI_Group world_group;
    int n, idx[64];

    MPI_Group_size(g, &n);
    if (n > 64)
        n = 64;
    for (int i = 0; i < n; i++)
        idx[i] = i;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_translate_ranks(g, n, idx, world_group, out);
    MPI_Group_free(&world_group);
    return n;
}

/* After comm's failure at iteration it, acknowledged: what this rank knows
 * of it. The number of problems found. */
static int check_known_failures(MPI_Comm comm, int it)
{
    MPI_Group acked, failed, members;
    int a[64], f[64], m[64], na, nf, nm, num_acked = -1, bad = 0;

    MPI_Comm_group(comm, &members);
    nm = world_ranks_of(members, m);
    MPI_Group_free(&members);
    MPIX_Comm_failure_get_acked(comm, &acked);
    MPIX_Comm_get_failed(comm, &failed);
    na = world_ranks_of(acked, a);
    nf = world_ranks_of(failed, f);
    MPIX_Comm_ack_failed(comm, 0, &num_acked);
    MPI_Group_free(&acked);
    MPI_Group_free(&failed);
    bad += na == 0 || nf < na || num_acked != na; /* the failure acknowledged is known */
    for (int i = 0; i < na; i++)
        bad += a[i] != f[i]; /* the acknowledged ones first, in the same order */
    for (int i = 0; i < nf; i++)
        bad += alive_at(f[i], it) == 1; /* only victims */
    for (int v = 0; v < n_victims; v++) {
        int member = 0, named = 0;
        for (int i = 0; i < nm; i++)
            member |= m[i] == victim[v];
        if (timed[v] || dies_at[v] > it || !member)
            continue;
        for (int i = 0; i < na; i++)
            named |= a[i] == victim[v];
        bad += !named; /* every victim dead before this step, once the step failed */
    }
    if (bad)
        fprintf(stderr, "mpi_ulfm: rank %d, iteration %d: %d acknowledged failed, %d failed "
                "(ack_failed says %d)%s\n", world_rank, it, na, nf, num_acked,
                nf > 0 ? "; not the victims" : "");
    return bad;
}

int main(int argc, char **argv)
{
    int iters = 0, failures = 0, shrinks = 0;

    int first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        nonblocking |= argv[first][1] == 'i';
        revoking |= argv[first][1] == 'r';
    }
    iters = argc > first ? atoi(argv[first]) : 0;
    for (int i = first + 1; i < argc && n_victims < MAX_VICTIMS; i++) {
        if (sscanf(argv[i], "%d@%d", &victim[n_victims], &dies_at[n_victims]) == 2)
            n_victims++;
        else if (sscanf(argv[i], "%d~%d", &victim[n_victims], &dies_at[n_victims]) == 2)
            timed[n_victims++] = 1;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int v = 0; v < n_victims; v++)
        if (timed[v] && victim[v] == world_rank) {
            struct itimerval at = {{0, 0}, {dies_at[v] / 1000000, dies_at[v] % 1000000}};
            signal(SIGALRM, die);
            setitimer(ITIMER_REAL, &at, NULL);
        }
    if (iters <= 0 || world_size > 64) {
        fprintf(stderr, "usage: mpi_ulfm [-i] [-r] ITERS [RANK@ITER | RANK~US ...] (at most 64 ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    MPI_Comm comm = MPI_COMM_WORLD, twin = MPI_COMM_NULL;
    long long total = 0, want_total = 0;
    MPI_Comm_dup(comm, &twin); /* MPI_COMM_NULL where a loss failed it */
    for (int it = 0; it < iters; it++) {
        if (alive_at(world_rank, it) == 0)
            raise(SIGKILL);
        struct results res;
        for (;;) {
            int ok = twin != MPI_COMM_NULL && step(comm, twin, it, &res) == MPI_SUCCESS;
            if (!ok && revoking) {
                MPIX_Comm_revoke(comm);
                if (twin != MPI_COMM_NULL)
                    MPIX_Comm_revoke(twin);
            }
            int rc = MPIX_Comm_agree(comm, &ok);
            if (ok && rc == MPI_SUCCESS)
                break;
            /* A rank was lost: every survivor gets here for this step. */
            MPI_Comm smaller;
            MPIX_Comm_failure_ack(comm);
            if (check_known_failures(comm, it) != 0 && failures++ == 0)
                fprintf(stderr, "mpi_ulfm: rank %d: the failures known are wrong\n", world_rank);
            if (MPIX_Comm_shrink(comm, &smaller) != MPI_SUCCESS) {
                fprintf(stderr, "mpi_ulfm: rank %d: MPIX_Comm_shrink failed\n", world_rank);
                return 3;
            }
            if (comm != MPI_COMM_WORLD)
                MPI_Comm_free(&comm);
            if (twin != MPI_COMM_NULL)
                MPI_Comm_free(&twin);
            comm = smaller;
            MPI_Comm_dup(comm, &twin);
            shrinks++;
        }
        /* The agreed step's members: the ranks its all-gather named. */
        long long want = 0, sum = res.sum;
        int k = 0, gathered_ok = 1, n = res.n, *ranks = res.ranks;
        for (int r = 0; r < world_size; r++) {
            int in = k < n && ranks[k] == r, alive = alive_at(r, it);
            if (in) {
                want += (long long)(r + 1) * (it + 1);
                k++;
            }
            gathered_ok &= alive < 0 || in == alive;
        }
        int me;
        MPI_Comm_rank(comm, &me);
        int want_left = ranks[(me + n - 1) % n], a2a_ok = 1;
        long long want_scan = 0;
        for (int i = 0; i < n; i++) {
            a2a_ok &= res.a2a[i] == ranks[i] * 64 + me;
            want_scan += i <= me ? ranks[i] + 1 : 0;
        }
        long long want_rsb = (long long)(me + 1) * (want / (it + 1));
        if (sum != want || res.word != 7 * it || !gathered_ok || k != n || res.left != want_left ||
            !a2a_ok || res.rsb != want_rsb || (!nonblocking && res.scan != want_scan)) {
            if (failures++ < 10)
                fprintf(stderr, "mpi_ulfm: rank %d, iteration %d: sum %lld (want %lld), bcast %d "
                        "(want %d), %d ranks gathered (%d in order)%s, message from %d (want %d), "
                        "all-to-all %s, reduce-scatter %lld (want %lld), scan %lld (want %lld)\n",
                        world_rank, it, sum, want, res.word, 7 * it, n, k,
                        gathered_ok ? "" : ", not the live ones", res.left, want_left,
                        a2a_ok ? "right" : "WRONG", res.rsb, want_rsb, nonblocking ? 0 : res.scan,
                        nonblocking ? 0 : want_scan);
        }
        total += sum;
        want_total += want;
    }
    /* The survivors' verdict, agreed. */
    int ok = failures == 0 && total == want_total;
    int agreed = MPIX_Comm_agree(comm, &ok);
    /* A timed victim still alive dies in MPI_Finalize, not while the
     * verdict is printed. One that died in the agreement may have been
     * the communicator's rank 0, the printer: the survivors shrink once
     * more to find theirs. */
    sigset_t alarm;
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    sigprocmask(SIG_BLOCK, &alarm, NULL);
    if (agreed != MPI_SUCCESS) {
        MPI_Comm smaller;
        MPIX_Comm_failure_ack(comm);
        if (MPIX_Comm_shrink(comm, &smaller) != MPI_SUCCESS) {
            fprintf(stderr, "mpi_ulfm: rank %d: MPIX_Comm_shrink failed\n", world_rank);
            return 3;
        }
        if (comm != MPI_COMM_WORLD)
            MPI_Comm_free(&comm);
        comm = smaller;
        shrinks++;
    }
    int me;
    MPI_Comm_rank(comm, &me);
    int size;
    MPI_Comm_size(comm, &size);
    if (me == 0)
        printf("mpi_ulfm: %d survivors of %d after %d shrinks: %s\n", size, world_size, shrinks,
               ok ? "all checks passed" : "CHECKS FAILED");
    fflush(stdout);
    sigprocmask(SIG_UNBLOCK, &alarm, NULL);
    if (comm != MPI_COMM_WORLD)
        MPI_Comm_free(&comm);
    if (twin != MPI_COMM_NULL)
        MPI_Comm_free(&twin);
    MPI_Finalize();
    return ok ? 0 : 1;
}
