/* mpi_types: derived datatypes (MPI 4.1, chapter 5) in every kind of call,
 * checked against the standard's definitions: a type's size, extent and
 * true extent (5.1.6, 5.1.7), the type map its constructor defines (5.1.2,
 * 5.1.3 for MPI_Get_address), and that a call moves exactly the bytes of
 * the type map: the data arrives where the receiving type puts it, and
 * every byte outside the map (the gaps of a vector, the padding of a
 * struct) keeps what it held (5.1.11: "the type map ... specifies which
 * locations are accessed").
 *
 * An ordinary MPI program (mpi.h only): `eccl-run -np N mpi_types`, or
 * alone. Exits non-zero after naming each wrong value.
 */
#include <mpi.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;

static void check(int ok, const char *what, long long index)
{
    if (!ok && failures++ < 30)
        fprintf(stderr, "mpi_types: rank %d of %d: %s (at %lld)\n", rank, size, what, index);
}

#define GAP (-7777) /* what every location outside a type map holds */

/* ---- size, extent, true extent (5.1.6-5.1.7) ---------------------------------- */

struct particle {
    double x;
    char tag;
}; /* a double and a char: 9 bytes of data, padded to 16 */

static void test_layouts(void)
{
    MPI_Datatype t, u, v;
    MPI_Aint lb, extent, tlb, textent;
    int bytes;

    /* contiguous(3, int): 12 bytes, extent 12. */
    MPI_Type_contiguous(3, MPI_INT, &t);
    MPI_Type_size(t, &bytes);
    MPI_Type_get_extent(t, &lb, &extent);
    check(bytes == 12 && lb == 0 && extent == 12, "contiguous(3, MPI_INT): size 12, extent 12", 0);
    MPI_Type_free(&t);
    check(t == MPI_DATATYPE_NULL, "MPI_Type_free sets the handle to MPI_DATATYPE_NULL", 0);

    /* vector(3, 2, 4, double): blocks of 2 at 0, 4, 8: ub = (8 + 2) * 8. */
    MPI_Type_vector(3, 2, 4, MPI_DOUBLE, &t);
    MPI_Type_size(t, &bytes);
    MPI_Type_get_extent(t, &lb, &extent);
    check(bytes == 48 && lb == 0 && extent == 80, "vector(3, 2, 4, MPI_DOUBLE): size 48, extent 80", 0);
    /* hvector of those, 2 of them 100 bytes apart (alignment 8: 180 -> 184). */
    MPI_Type_create_hvector(2, 1, 100, t, &u);
    MPI_Type_size(u, &bytes);
    MPI_Type_get_extent(u, &lb, &extent);
    check(bytes == 96 && lb == 0 && extent == 184, "hvector(2, 1, 100 B, vector): size 96, extent 184", 0);
    MPI_Type_free(&u);
    MPI_Type_free(&t);

    /* indexed with a negative displacement: blocks {2 at -1, 1 at 3}. */
    int lens[2] = {2, 1}, displs[2] = {-1, 3};
    MPI_Type_indexed(2, lens, displs, MPI_INT, &t);
    MPI_Type_get_extent(t, &lb, &extent);
    MPI_Type_get_true_extent(t, &tlb, &textent);
    check(lb == -4 && extent == 20 && tlb == -4 && textent == 20, "indexed {2@-1, 1@3}: lb -4, extent 20", 0);
    MPI_Type_free(&t);

    /* struct {double; char}: data 9, extent 16 (the alignment's epsilon),
     * true extent 9. */
    struct particle p;
    MPI_Aint base, at[2];
    int blens[2] = {1, 1};
    MPI_Datatype types[2] = {MPI_DOUBLE, MPI_CHAR};
    MPI_Get_address(&p, &base);
    MPI_Get_address(&p.x, &at[0]);
    MPI_Get_address(&p.tag, &at[1]);
    at[0] = MPI_Aint_diff(at[0], base);
    at[1] = MPI_Aint_diff(at[1], base);
    MPI_Type_create_struct(2, blens, at, types, &t);
    MPI_Type_size(t, &bytes);
    MPI_Type_get_extent(t, &lb, &extent);
    MPI_Type_get_true_extent(t, &tlb, &textent);
    check(bytes == 9 && lb == 0 && extent == (MPI_Aint)sizeof p && tlb == 0 && textent == 9,
          "struct {double; char}: size 9, extent sizeof, true extent 9", 0);
    /* resized: lb and extent as given; the true extent stays. */
    MPI_Type_create_resized(t, -8, 40, &u);
    MPI_Type_get_extent(u, &lb, &extent);
    MPI_Type_get_true_extent(u, &tlb, &textent);
    check(lb == -8 && extent == 40 && tlb == 0 && textent == 9, "resized(-8, 40): lb -8, extent 40", 0);
    /* A resized type's bounds are its bounds in a constructor (no rounding). */
    MPI_Type_contiguous(2, u, &v);
    MPI_Type_get_extent(v, &lb, &extent);
    check(lb == -8 && extent == 80, "contiguous(2, resized): lb -8, extent 80", 0);
    MPI_Type_free(&v);
    MPI_Type_dup(u, &v);
    MPI_Type_get_extent(v, &lb, &extent);
    MPI_Type_size(v, &bytes);
    check(lb == -8 && extent == 40 && bytes == 9, "MPI_Type_dup keeps bounds and size", 0);
    MPI_Type_free(&v);
    MPI_Type_free(&u);
    MPI_Type_free(&t);

    /* indexed_block and hindexed_block: 3 blocks of 2 shorts. */
    int ib[3] = {4, 0, 9};
    MPI_Aint hb[3] = {8, 0, 18};
    MPI_Type_create_indexed_block(3, 2, ib, MPI_SHORT, &t);
    MPI_Type_create_hindexed_block(3, 2, hb, MPI_SHORT, &u);
    MPI_Aint lb2, extent2;
    MPI_Type_get_extent(t, &lb, &extent);
    MPI_Type_get_extent(u, &lb2, &extent2);
    check(lb == 0 && extent == 22 && lb2 == 0 && extent2 == 22, "indexed_block = hindexed_block: extent 22", 0);
    MPI_Type_free(&u);
    MPI_Type_free(&t);
}

/* ---- point-to-point: a matrix column (vector) ------------------------------------
 * A rows x cols matrix of ints; column c is vector(rows, 1, cols). Each rank
 * sends its column 1 to the next rank, which receives it into column 2 of a
 * matrix full of GAP (the other columns must stay GAP), and as a contiguous
 * array; MPI_Get_count counts in either type. */

enum { ROWS = 37, COLS = 5 };

static int value(int r, int i, int j)
{
    return r * 100000 + i * 100 + j;
}

static void test_p2p(void)
{
    int m[ROWS][COLS], got[ROWS][COLS], flat[ROWS];
    MPI_Datatype column;
    MPI_Status st;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, n;

    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) {
            m[i][j] = value(rank, i, j);
            got[i][j] = GAP;
        }
    MPI_Type_vector(ROWS, 1, COLS, MPI_INT, &column);
    MPI_Type_commit(&column);
    MPI_Sendrecv(&m[0][1], 1, column, next, 1, &got[0][2], 1, column, prev, 1, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, column, &n);
    check(n == 1, "MPI_Get_count in the column type", n);
    MPI_Get_count(&st, MPI_INT, &n);
    check(n == ROWS, "MPI_Get_count of a column in MPI_INT", n);
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++)
            check(got[i][j] == (j == 2 ? value(prev, i, 1) : GAP), "a column received into a column", i * COLS + j);
    /* Into a contiguous array, by a nonblocking receive, and the type
     * freed while the send is in flight (5.1.9: pending calls keep it). */
    MPI_Request rq[2];
    MPI_Irecv(flat, ROWS, MPI_INT, prev, 2, MPI_COMM_WORLD, &rq[0]);
    MPI_Isend(&m[0][3], 1, column, next, 2, MPI_COMM_WORLD, &rq[1]);
    MPI_Type_free(&column);
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
    for (int i = 0; i < ROWS; i++)
        check(flat[i] == value(prev, i, 3), "a column received as MPI_INT", i);
    /* From contiguous into a column, the receive's type freed while it waits. */
    MPI_Type_vector(ROWS, 1, COLS, MPI_INT, &column);
    MPI_Type_commit(&column);
    for (int i = 0; i < ROWS; i++) {
        flat[i] = value(rank, i, 9);
        for (int j = 0; j < COLS; j++)
            got[i][j] = GAP;
    }
    MPI_Irecv(&got[0][4], 1, column, prev, 3, MPI_COMM_WORLD, &rq[0]);
    MPI_Type_free(&column);
    MPI_Isend(flat, ROWS, MPI_INT, next, 3, MPI_COMM_WORLD, &rq[1]);
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++)
            check(got[i][j] == (j == 4 ? value(prev, i, 9) : GAP), "MPI_INT received into a column", i * COLS + j);
}

/* ---- collectives moving data ------------------------------------------------------ */

/* An indexed type over ints: blocks {3 at 0, 2 at 5, 1 at 9}: 6 ints of an
 * extent of 10. */
static MPI_Datatype make_indexed(void)
{
    int lens[3] = {3, 2, 1}, displs[3] = {0, 5, 9};
    MPI_Datatype t;

    MPI_Type_indexed(3, lens, displs, MPI_INT, &t);
    MPI_Type_commit(&t);
    return t;
}

static int in_indexed(int k) /* is int k of an element in the type map? */
{
    k %= 10;
    return k < 3 || k == 5 || k == 6 || k == 9;
}

static void test_bcast(void)
{
    enum { N = 7 };
    MPI_Datatype t = make_indexed();
    int *buf = malloc(N * 10 * sizeof *buf);

    for (int root = 0; root < size; root++) {
        for (int k = 0; k < N * 10; k++)
            buf[k] = rank == root ? value(root, k, 0) : GAP;
        MPI_Bcast(buf, N, t, root, MPI_COMM_WORLD);
        for (int k = 0; k < N * 10; k++)
            check(buf[k] == (rank == root || in_indexed(k) ? value(root, k, 0) : GAP),
                  "MPI_Bcast of an indexed type", k);
    }
    free(buf);
    MPI_Type_free(&t);
}

/* The transpose pattern: each rank holds B rows of an (size B) x (size B)
 * matrix and sends its block j (B rows, columns j B ..) to rank j as B
 * columns of a resized column type, received as plain ints. */
static void test_transpose(void)
{
    enum { B = 3 };
    int n = size * B;
    int *a = malloc((size_t)(B * n) * sizeof *a), *t = malloc((size_t)(B * n) * sizeof *t);
    MPI_Datatype col, colr;

    for (int i = 0; i < B; i++)
        for (int j = 0; j < n; j++)
            a[i * n + j] = (rank * B + i) * 1000 + j; /* element (global row, column) */
    /* One column of my B rows, resized to one int so that consecutive
     * columns follow each other. */
    MPI_Type_vector(B, 1, n, MPI_INT, &col);
    MPI_Type_create_resized(col, 0, sizeof(int), &colr);
    MPI_Type_commit(&colr);
    MPI_Alltoall(a, B, colr, t, B * B, MPI_INT, MPI_COMM_WORLD);
    /* From rank j: B columns (global columns rank * B + c) of its B rows
     * (global rows j * B + i), column by column: t[j B B + c B + i]. */
    for (int j = 0; j < size; j++)
        for (int c = 0; c < B; c++)
            for (int i = 0; i < B; i++)
                check(t[j * B * B + c * B + i] == (j * B + i) * 1000 + rank * B + c, "MPI_Alltoall of columns",
                      j * B * B + c * B + i);
    /* The same with the derived type on the receive side: all-gather my
     * row 0 from everyone into column-major order (column k of g is
     * rank k's row), the gaps untouched. */
    int *g = malloc((size_t)(n * size) * sizeof *g);
    MPI_Datatype gcol, gcolr;
    for (int k = 0; k < n * size; k++)
        g[k] = GAP;
    MPI_Type_vector(n, 1, size, MPI_INT, &gcol);
    MPI_Type_create_resized(gcol, 0, sizeof(int), &gcolr);
    MPI_Type_commit(&gcolr);
    MPI_Allgather(a, n, MPI_INT, g, 1, gcolr, MPI_COMM_WORLD);
    for (int row = 0; row < n; row++)
        for (int k = 0; k < size; k++)
            check(g[row * size + k] == (k * B) * 1000 + row, "MPI_Allgather into columns", row * size + k);
    /* Nonblocking, in place: the same columns gathered again from the
     * copies each rank holds in its own column. */
    for (int row = 0; row < n; row++)
        for (int k = 0; k < size; k++)
            if (k != rank)
                g[row * size + k] = GAP;
    MPI_Request rq;
    MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, 1, gcolr, MPI_COMM_WORLD, &rq);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    for (int row = 0; row < n; row++)
        for (int k = 0; k < size; k++)
            check(g[row * size + k] == (k * B) * 1000 + row, "MPI_Iallgather in place into columns",
                  row * size + k);
    MPI_Type_free(&gcolr);
    MPI_Type_free(&gcol);
    MPI_Type_free(&colr);
    MPI_Type_free(&col);
    free(g);
    free(t);
    free(a);
}

/* MPI_Gatherv and MPI_Scatter of an indexed type at root size - 1: rank r
 * sends 1 or 2 elements, placed at element displacement 2 r (a gap of one
 * element after the odd ranks' blocks stays GAP). */
static void test_rooted(void)
{
    MPI_Datatype t = make_indexed();
    int root = size - 1, total = 2 * size + 1;
    int *counts = malloc((size_t)size * sizeof *counts), *displs = malloc((size_t)size * sizeof *displs);
    int *mine = malloc((size_t)(size + 1) * 10 * sizeof *mine), *all = malloc((size_t)total * 10 * sizeof *all);

    for (int r = 0; r < size; r++) {
        counts[r] = r % 2 + 1; /* 1 or 2 elements, block r at element 2 r */
        displs[r] = 2 * r;
    }
    for (int k = 0; k < (size + 1) * 10; k++)
        mine[k] = value(rank, k, 1);
    for (int k = 0; k < total * 10; k++)
        all[k] = GAP;
    MPI_Gatherv(mine, counts[rank], t, all, counts, displs, t, root, MPI_COMM_WORLD);
    if (rank == root)
        for (int r = 0; r < size; r++)
            for (int e = 0; e < 2; e++)
                for (int k = 0; k < 10; k++) {
                    int at = (displs[r] + e) * 10 + k;
                    int want = e < counts[r] && in_indexed(k) ? value(r, e * 10 + k, 1) : GAP;
                    check(all[at] == want, "MPI_Gatherv of an indexed type", at);
                }
    /* Scatter: the root's elements 0 .. size - 1, one each, into a
     * contiguous MPI_INT receive of 6. */
    int six[6];
    for (int k = 0; k < size * 10; k++)
        all[k] = value(root, k, 2);
    MPI_Scatter(all, 1, t, six, 6, MPI_INT, root, MPI_COMM_WORLD);
    int at[6] = {0, 1, 2, 5, 6, 9};
    for (int k = 0; k < 6; k++)
        check(six[k] == value(root, rank * 10 + at[k], 2), "MPI_Scatter of an indexed type", k);
    free(all);
    free(mine);
    free(displs);
    free(counts);
    MPI_Type_free(&t);
}

/* A struct of a double and a char travels whole; its padding stays. */
static void test_struct_bcast(void)
{
    enum { N = 5 };
    struct particle p[N];
    MPI_Datatype t;
    MPI_Aint at[2] = {offsetof(struct particle, x), offsetof(struct particle, tag)};
    int blens[2] = {1, 1};
    MPI_Datatype types[2] = {MPI_DOUBLE, MPI_CHAR};

    MPI_Type_create_struct(2, blens, at, types, &t);
    MPI_Type_commit(&t);
    memset(p, 0x5a, sizeof p);
    if (rank == 0)
        for (int i = 0; i < N; i++) {
            p[i].x = i * 1.5;
            p[i].tag = (char)('a' + i);
        }
    MPI_Bcast(p, N, t, 0, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++) {
        const unsigned char *raw = (const unsigned char *)&p[i];
        check(p[i].x == i * 1.5 && p[i].tag == 'a' + i, "MPI_Bcast of a struct", i);
        if (rank != 0)
            for (size_t b = offsetof(struct particle, tag) + 1; b < sizeof p[i]; b++)
                check(raw[b] == 0x5a, "a struct's padding untouched", i);
    }
    MPI_Type_free(&t);
}

/* MPI_Alltoallw (6.8): rank r sends rank j j + 1 ints at byte 64 j, as
 * MPI_INT; each rank receives its me + 1 ints from rank i at byte 256 i,
 * from even ranks into every other int (a vector), from odd ones
 * contiguous. Everything else keeps GAP. */
static void test_alltoallw(void)
{
    int *sbuf = malloc((size_t)size * 64), *rbuf = malloc((size_t)size * 256);
    int *sc = malloc((size_t)size * 6 * sizeof *sc), *sd = sc + size, *rc = sc + 2 * size,
        *rd = sc + 3 * size;
    MPI_Datatype *st = malloc((size_t)size * 2 * sizeof *st), *rt = st + size, every_other;
    int me = rank, nint = 64 / (int)sizeof(int);

    MPI_Type_vector(me + 1, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    for (int k = 0; k < size * nint; k++)
        sbuf[k] = k / nint < size && k % nint <= k / nint ? value(rank, k / nint, k % nint) : GAP;
    for (int k = 0; k < size * 256 / (int)sizeof(int); k++)
        rbuf[k] = GAP;
    for (int j = 0; j < size; j++) {
        sc[j] = j + 1;
        sd[j] = 64 * j;
        st[j] = MPI_INT;
        rc[j] = j % 2 == 0 ? 1 : me + 1;
        rd[j] = 256 * j;
        rt[j] = j % 2 == 0 ? every_other : MPI_INT;
    }
    MPI_Alltoallw(sbuf, sc, sd, st, rbuf, rc, rd, rt, MPI_COMM_WORLD);
    int per = 256 / (int)sizeof(int);
    for (int i = 0; i < size; i++)
        for (int k = 0; k < per; k++) {
            int want = GAP;
            if (i % 2 == 0 && k % 2 == 0 && k / 2 <= me)
                want = value(i, me, k / 2);
            if (i % 2 == 1 && k <= me)
                want = value(i, me, k);
            check(rbuf[i * per + k] == want, "MPI_Alltoallw with a type per block", i * per + k);
        }
    MPI_Type_free(&every_other);
    free(st);
    free(sc);
    free(rbuf);
    free(sbuf);
}

/* ---- reductions --------------------------------------------------------------------- */

/* Predefined operations on a derived type apply to each basic element
 * (6.9.2): an all-reduce of vector(4, 1, 3, int) sums those ints; the gaps
 * stay. */
static void test_reduce_vector(void)
{
    enum { N = 3, EXT = 10 }; /* vector(4, 1, 3): extent 10 ints */
    MPI_Datatype t;
    int in[N * EXT], out[N * EXT];

    MPI_Type_vector(4, 1, 3, MPI_INT, &t);
    MPI_Type_commit(&t);
    for (int k = 0; k < N * EXT; k++) {
        in[k] = (rank + 1) * (k + 1);
        out[k] = GAP;
    }
    MPI_Allreduce(in, out, N, t, MPI_SUM, MPI_COMM_WORLD);
    int tri = size * (size + 1) / 2;
    for (int k = 0; k < N * EXT; k++)
        check(out[k] == (k % EXT % 3 == 0 ? tri * (k + 1) : GAP), "MPI_Allreduce of a vector type", k);
    /* MPI_MAX to a root, in place there. */
    int root = size / 2;
    for (int k = 0; k < N * EXT; k++)
        out[k] = rank == root ? in[k] : GAP;
    MPI_Reduce(rank == root ? MPI_IN_PLACE : in, out, N, t, MPI_MAX, root, MPI_COMM_WORLD);
    if (rank == root)
        for (int k = 0; k < N * EXT; k++)
            check(out[k] == (k % EXT % 3 == 0 ? size * (k + 1) : in[k]), "MPI_Reduce in place of a vector type", k);
    /* Nonblocking, the type freed before the wait. */
    MPI_Request rq;
    for (int k = 0; k < N * EXT; k++)
        out[k] = GAP;
    MPI_Iallreduce(in, out, N, t, MPI_SUM, MPI_COMM_WORLD, &rq);
    MPI_Type_free(&t);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    for (int k = 0; k < N * EXT; k++)
        check(out[k] == (k % EXT % 3 == 0 ? tri * (k + 1) : GAP), "MPI_Iallreduce of a vector type", k);
    /* Reduce_scatter_block of contiguous(2, int) pairs. */
    MPI_Datatype pair;
    int *rin = malloc((size_t)size * 2 * sizeof *rin), rout[2];
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    for (int k = 0; k < 2 * size; k++)
        rin[k] = rank + k;
    MPI_Reduce_scatter_block(rin, rout, 1, pair, MPI_SUM, MPI_COMM_WORLD);
    for (int k = 0; k < 2; k++)
        check(rout[k] == tri - size + size * (2 * rank + k), "MPI_Reduce_scatter_block of pairs", k);
    MPI_Type_free(&pair);
    free(rin);
}

/* A user operation on a struct type: its function sees the program's
 * layout and the derived handle (6.9.5); the padding of the result stays. */
struct cplx {
    double re, im;
    int n;
}; /* 20 bytes of data, extent 24 */

static MPI_Datatype cplx_type;

static void cplx_mul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    struct cplx *a = in, *b = inout;

    if (*dt != cplx_type)
        failures++;
    for (int i = 0; i < *len; i++) {
        struct cplx c = {a[i].re * b[i].re - a[i].im * b[i].im, a[i].re * b[i].im + a[i].im * b[i].re,
                         a[i].n + b[i].n};
        b[i].re = c.re;
        b[i].im = c.im;
        b[i].n = c.n;
    }
}

static void test_user_op(void)
{
    enum { N = 4 };
    struct cplx in[N], out[N];
    MPI_Aint at[2] = {offsetof(struct cplx, re), offsetof(struct cplx, n)};
    int blens[2] = {2, 1};
    MPI_Datatype types[2] = {MPI_DOUBLE, MPI_INT};
    MPI_Op op;

    MPI_Type_create_struct(2, blens, at, types, &cplx_type);
    MPI_Type_commit(&cplx_type);
    MPI_Op_create(cplx_mul, 1, &op);
    memset(out, 0x33, sizeof out);
    for (int i = 0; i < N; i++)
        in[i] = (struct cplx){i == 0 ? 0.0 : 1.0, i == 0 ? 1.0 : 0.0, rank}; /* i, or 1 */
    MPI_Allreduce(in, out, N, cplx_type, op, MPI_COMM_WORLD);
    /* i^size: 1, i, -1, -i */
    double re[4] = {1, 0, -1, 0}, im[4] = {0, 1, 0, -1};
    for (int i = 0; i < N; i++) {
        const unsigned char *raw = (const unsigned char *)&out[i];
        double wre = i == 0 ? re[size % 4] : 1.0, wim = i == 0 ? im[size % 4] : 0.0;
        check(out[i].re == wre && out[i].im == wim && out[i].n == size * (size - 1) / 2,
              "MPI_Allreduce with a user op on a struct", i);
        for (size_t b = offsetof(struct cplx, n) + sizeof(int); b < sizeof out[i]; b++)
            check(raw[b] == 0x33, "the result's padding untouched", i);
    }
    /* Reduce_local with it. */
    struct cplx a[N], b[N];
    for (int i = 0; i < N; i++) {
        a[i] = (struct cplx){0, 1, 1};
        b[i] = (struct cplx){0, 1, 2};
    }
    MPI_Reduce_local(a, b, N, cplx_type, op);
    for (int i = 0; i < N; i++)
        check(b[i].re == -1 && b[i].im == 0 && b[i].n == 3, "MPI_Reduce_local with a user op", i);
    MPI_Op_free(&op);
    MPI_Type_free(&cplx_type);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    test_layouts();
    test_p2p();
    test_bcast();
    test_transpose();
    test_rooted();
    test_struct_bcast();
    test_alltoallw();
    test_reduce_vector();
    test_user_op();
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_types: %s (%d ranks, %d wrong)\n", all == 0 ? "ok" : "FAILED", size, all);
    MPI_Finalize();
    return all != 0;
}
