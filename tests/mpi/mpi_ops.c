/* mpi_ops: the reductions and collectives that libeccl_mpi computes on top
 * of eccl rather than with eccl's kernels, checked against the MPI
 * standard's definitions (MPI 4.1: 6.9.2 predefined operations, 6.9.4
 * MINLOC and MAXLOC, 6.9.5 user-defined operations, 6.11 scan, 6.5 and
 * 6.6 gather and scatter, 6.9.7 MPI_Reduce_local).
 *
 * An ordinary MPI program (mpi.h only): `eccl-run -np N mpi_ops`, or alone.
 * Every expected value is computed here from the inputs each rank is known
 * to contribute. Exits non-zero after naming each wrong value.
 */
#include <mpi.h>

#include <complex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;

static void check(int ok, const char *what, long long index)
{
    if (!ok && failures++ < 20)
        fprintf(stderr, "mpi_ops: rank %d of %d: %s (element %lld)\n", rank, size, what, index);
}

/* ---- MAXLOC / MINLOC (6.9.4) ------------------------------------------------------
 * Rank r contributes value (r * 7) % size for element 0 and, for element 1,
 * the same value on every rank: a tie, which goes to the lowest index. */

struct double_int { double value; int index; };
struct int_pair { int value; int index; };

static void test_loc(void)
{
    struct double_int in[2] = {{(double)((rank * 7) % size), rank}, {3.5, 100 + rank}}, out[2];
    struct int_pair pin[2] = {{-(rank % 3), rank}, {42, 10 * rank}}, pout[2];
    int max0 = -1, max0_at = -1, min0 = size, min0_at = -1, pmin = 1, pmin_at = -1;

    for (int r = 0; r < size; r++) {
        int v = (r * 7) % size;
        if (v > max0) max0 = v, max0_at = r;
        if (v < min0) min0 = v, min0_at = r;
        if (-(r % 3) < pmin) pmin = -(r % 3), pmin_at = r;
    }
    MPI_Allreduce(in, out, 2, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    check(out[0].value == max0 && out[0].index == max0_at, "MAXLOC on MPI_DOUBLE_INT", 0);
    check(out[1].value == 3.5 && out[1].index == 100, "MAXLOC tie: the lowest index", 1);
    MPI_Allreduce(in, out, 2, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
    check(out[0].value == min0 && out[0].index == min0_at, "MINLOC on MPI_DOUBLE_INT", 0);
    check(out[1].index == 100, "MINLOC tie: the lowest index", 1);
    /* To a root that is not 0, and in place there. */
    int root = size - 1;
    if (rank == root) memcpy(pout, pin, sizeof pin);
    MPI_Reduce(rank == root ? MPI_IN_PLACE : pin, pout, 2, MPI_2INT, MPI_MINLOC, root, MPI_COMM_WORLD);
    if (rank == root) {
        check(pout[0].value == pmin && pout[0].index == pmin_at, "MINLOC on MPI_2INT at a root", 0);
        check(pout[1].value == 42 && pout[1].index == 0, "MINLOC tie on MPI_2INT", 1);
    }
    MPI_Aint lb, extent;
    int bytes;
    MPI_Type_get_extent(MPI_DOUBLE_INT, &lb, &extent);
    MPI_Type_size(MPI_DOUBLE_INT, &bytes);
    check(lb == 0 && extent == (MPI_Aint)sizeof(struct double_int), "MPI_DOUBLE_INT's extent", 0);
    check(bytes == (int)(sizeof(double) + sizeof(int)), "MPI_DOUBLE_INT's size", 0);
}

/* ---- logical and bitwise operations (6.9.2) ----------------------------------------
 * Rank r contributes bit r % 8 of element 0 set, and for the logical ones
 * element i true where r <= i. */

static void test_bits(void)
{
    enum { N = 6 };
    int in[N], out[N];
    unsigned char b = (unsigned char)(1u << (rank % 8)), bor = 0, band = 0xff, bxor = 0, got;
    _Bool flag = rank == size - 1, any;

    for (int r = 0; r < size; r++) {
        unsigned char br = (unsigned char)(1u << (r % 8));
        bor |= br, band &= br, bxor ^= br;
    }
    for (int i = 0; i < N; i++) in[i] = rank <= i; /* one rank: the input is the result */
    MPI_Allreduce(in, out, N, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++) check(out[i] == (size - 1 <= i), "MPI_LAND on MPI_INT", i);
    MPI_Allreduce(in, out, N, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++) check(out[i] == 1, "MPI_LOR on MPI_INT", i);
    MPI_Allreduce(in, out, N, MPI_INT, MPI_LXOR, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++) {
        int trues = i + 1 < size ? i + 1 : size;
        check(out[i] == trues % 2, "MPI_LXOR on MPI_INT", i);
    }
    MPI_Allreduce(&b, &got, 1, MPI_UNSIGNED_CHAR, MPI_BOR, MPI_COMM_WORLD);
    check(got == bor, "MPI_BOR on MPI_UNSIGNED_CHAR", 0);
    MPI_Allreduce(&b, &got, 1, MPI_BYTE, MPI_BAND, MPI_COMM_WORLD);
    check(got == band, "MPI_BAND on MPI_BYTE", 0);
    got = b;
    MPI_Allreduce(MPI_IN_PLACE, &got, 1, MPI_BYTE, MPI_BXOR, MPI_COMM_WORLD);
    check(got == bxor, "MPI_BXOR on MPI_BYTE, in place", 0);
    MPI_Allreduce(&flag, &any, 1, MPI_C_BOOL, MPI_LOR, MPI_COMM_WORLD);
    check(any == 1, "MPI_LOR on MPI_C_BOOL", 0);
    /* Reduce-scatter with an operation eccl lacks: block r of the result
     * goes to rank r. */
    int *vin = malloc((size_t)size * 2 * sizeof *vin), vout[2];
    for (int i = 0; i < 2 * size; i++) vin[i] = (i + rank) & 3 ? 1 << (rank % 30) : 0;
    MPI_Reduce_scatter_block(vin, vout, 2, MPI_INT, MPI_BOR, MPI_COMM_WORLD);
    for (int k = 0; k < 2; k++) {
        int i = 2 * rank + k, want = 0;
        for (int r = 0; r < size; r++) want |= (i + r) & 3 ? 1 << (r % 30) : 0;
        check(vout[k] == want, "MPI_Reduce_scatter_block with MPI_BOR", i);
    }
    free(vin);
}

/* ---- long double and complex (6.9.2: floating point, complex) -------------------- */

static void test_wide(void)
{
    long double x = 0.25L + rank, sum;
    double _Complex z = (double)(rank + 1) + 1.0 * I, prod, want = 1.0;

    MPI_Allreduce(&x, &sum, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    check(sum == 0.25L * size + (long double)size * (size - 1) / 2, "MPI_SUM on MPI_LONG_DOUBLE", 0);
    MPI_Allreduce(&z, &prod, 1, MPI_C_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD);
    for (int r = size - 1; r >= 0; r--) want = ((double)(r + 1) + 1.0 * I) * want;
    check(prod == want, "MPI_PROD on MPI_C_DOUBLE_COMPLEX (rank order)", 0);
}

/* ---- user-defined operations (6.9.5) ------------------------------------------------
 * An affine map x -> a x + b as the pair (a, b); composing them is
 * associative and not commutative, so the order MPI prescribes shows:
 * the result of ranks 0..k is f0 o f1 o ... o fk applied as
 * inoutvec = invec o inoutvec (invec the lower ranks'). Integers modulo
 * 2^32 keep it exact. */

typedef struct { unsigned a, b; } affine;

static void compose(void *invec, void *inoutvec, int *len, MPI_Datatype *datatype)
{
    affine *in = invec, *io = inoutvec;

    if (*datatype != MPI_2INT && *datatype != MPI_UNSIGNED_LONG_LONG) abort();
    for (int i = 0; i < *len; i++) {
        affine f = in[i], g = io[i]; /* (f o g)(x) = f(g(x)) = f.a (g.a x + g.b) + f.b */
        io[i] = (affine){f.a * g.a, f.a * g.b + f.b};
    }
}

static affine mine(int r, int i) { return (affine){2u * (unsigned)r + 3u + (unsigned)i, 7u * (unsigned)r + 1u}; }

/* f_lo o ... o f_hi */
static affine chain(int lo, int hi, int i)
{
    affine acc = {1, 0};
    for (int r = hi; r >= lo; r--) {
        affine f = mine(r, i);
        acc = (affine){f.a * acc.a, f.a * acc.b + f.b};
    }
    return acc;
}

static int same(affine x, affine y) { return x.a == y.a && x.b == y.b; }

static void test_user_ops(void)
{
    enum { N = 3 };
    MPI_Op op;
    int commute = 1;
    affine in[N], out[N];

    MPI_Op_create(compose, 0, &op);
    MPI_Op_commutative(op, &commute);
    check(commute == 0, "MPI_Op_commutative of a non-commutative op", 0);
    for (int i = 0; i < N; i++) in[i] = mine(rank, i);
    /* MPI_2INT: two ints, the size of an affine. */
    MPI_Allreduce(in, out, N, MPI_2INT, op, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++) check(same(out[i], chain(0, size - 1, i)), "MPI_Allreduce, user op", i);
    MPI_Reduce(in, out, N, MPI_2INT, op, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int i = 0; i < N; i++) check(same(out[i], chain(0, size - 1, i)), "MPI_Reduce, user op", i);
    MPI_Scan(in, out, N, MPI_2INT, op, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++) check(same(out[i], chain(0, rank, i)), "MPI_Scan, user op", i);
    memset(out, 0xab, sizeof out);
    MPI_Exscan(in, out, N, MPI_2INT, op, MPI_COMM_WORLD);
    for (int i = 0; rank > 0 && i < N; i++)
        check(same(out[i], chain(0, rank - 1, i)), "MPI_Exscan, user op", i);
    /* MPI_Reduce_local: inoutbuf = inbuf op inoutbuf. */
    affine f = mine(1, 0), g = mine(2, 0);
    MPI_Reduce_local(&f, &g, 1, MPI_UNSIGNED_LONG_LONG, op);
    check(same(g, chain(1, 2, 0)), "MPI_Reduce_local, user op", 0);
    MPI_Op_free(&op);
    check(op == MPI_OP_NULL, "MPI_Op_free sets MPI_OP_NULL", 0);

    /* The prefix reductions with a predefined operation, in place. */
    long long v = rank + 1, w = rank + 1;
    MPI_Scan(MPI_IN_PLACE, &v, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    check(v == (long long)(rank + 1) * (rank + 2) / 2, "MPI_Scan MPI_SUM in place", 0);
    MPI_Exscan(MPI_IN_PLACE, &w, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    check(rank == 0 || w == rank, "MPI_Exscan MPI_MAX in place", 0);
    int a = 6, b = 10;
    MPI_Reduce_local(&a, &b, 1, MPI_INT, MPI_BXOR);
    check(b == 12, "MPI_Reduce_local MPI_BXOR", 0);
}

/* ---- gather and scatter (6.5, 6.6) ----------------------------------------------------
 * Rank r's block of k elements is 1000 r + j; every root, in place and
 * not, and the v variants with rank r's block of r + 1 elements one
 * element past the end of rank r - 1's (the gaps stay untouched). */

static void test_rooted(void)
{
    enum { K = 5, GUARD = -7 };
    int send[K], *all = malloc((size_t)size * (K + 3 * size) * sizeof *all);
    int *counts = malloc((size_t)size * sizeof *counts), *displs = malloc((size_t)size * sizeof *displs);
    int total = 0;

    for (int r = 0; r < size; r++) {
        counts[r] = r + 1;
        displs[r] = total;
        total += r + 2;
    }
    for (int root = 0; root < size; root++) {
        for (int j = 0; j < K; j++) send[j] = 1000 * rank + j;
        for (int in_place = 0; in_place < 2; in_place++) {
            for (int i = 0; i < size * K; i++) all[i] = GUARD;
            if (in_place && rank == root) memcpy(all + root * K, send, sizeof send);
            MPI_Gather(in_place && rank == root ? MPI_IN_PLACE : send, K, MPI_INT, all, K, MPI_INT,
                       root, MPI_COMM_WORLD);
            for (int i = 0; rank == root && i < size * K; i++)
                check(all[i] == 1000 * (i / K) + i % K, "MPI_Gather", i);
            /* Scatter the gathered blocks back, shifted by one rank. */
            for (int i = 0; rank == root && i < size * K; i++) all[i] = 1000 * ((i / K + 1) % size) + i % K;
            int back[K];
            if (in_place && rank == root) {
                MPI_Scatter(all, K, MPI_INT, MPI_IN_PLACE, K, MPI_INT, root, MPI_COMM_WORLD);
                memcpy(back, all + root * K, sizeof back);
            } else {
                MPI_Scatter(all, K, MPI_INT, back, K, MPI_INT, root, MPI_COMM_WORLD);
            }
            for (int j = 0; j < K; j++) check(back[j] == 1000 * ((rank + 1) % size) + j, "MPI_Scatter", j);
        }
        /* Gatherv: rank r sends its r + 1 elements to displs[r]. */
        for (int i = 0; i < total; i++) all[i] = GUARD;
        int mine_n = rank + 1, vsend[64];
        for (int j = 0; j < mine_n; j++) vsend[j] = 100 * rank + j;
        MPI_Gatherv(vsend, mine_n, MPI_INT, all, counts, displs, MPI_INT, root, MPI_COMM_WORLD);
        for (int i = 0; rank == root && i < total; i++) {
            int want = GUARD;
            for (int q = 0; q < size; q++)
                if (i >= displs[q] && i < displs[q] + counts[q]) want = 100 * q + (i - displs[q]);
            check(all[i] == want, "MPI_Gatherv", i);
        }
        /* Scatterv: the same layout back. */
        int vrecv[64];
        for (int j = 0; j < 64; j++) vrecv[j] = GUARD;
        MPI_Scatterv(all, counts, displs, MPI_INT, vrecv, mine_n, MPI_INT, root, MPI_COMM_WORLD);
        for (int j = 0; j < mine_n + 1; j++)
            check(vrecv[j] == (j < mine_n ? 100 * rank + j : GUARD), "MPI_Scatterv", j);
    }
    free(all);
    free(counts);
    free(displs);
}

int main(int argc, char **argv)
{
    int class = -1;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 60) {
        fprintf(stderr, "mpi_ops: at most 60 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Error_class(MPI_ERR_OP, &class);
    check(class == MPI_ERR_OP, "MPI_Error_class", 0);
    test_loc();
    test_bits();
    test_wide();
    test_user_ops();
    test_rooted();
    int all_failures = 0;
    MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0 && all_failures == 0) printf("mpi_ops: %d ranks: all checks passed\n", size);
    return all_failures != 0;
}
