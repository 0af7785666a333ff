/* The master's shared-state election (core/state/sync.h), rule by rule. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "state/sync.h"

/* Two key sets: A and B differ in the hash of "w" only. */
static const eccl_wire_sync_key A[2] = {{"step", 8, 11, ECCL_U64}, {"w", 4096, 100, ECCL_F32}};
static const eccl_wire_sync_key B[2] = {{"step", 8, 11, ECCL_U64}, {"w", 4096, 200, ECCL_F32}};
static const eccl_wire_sync_key C[2] = {{"step", 8, 12, ECCL_U64}, {"w", 4096, 300, ECCL_F32}};

static eccl_sync_voter voter(uint64_t id, const eccl_wire_sync_key *k, int strategy)
{
    eccl_sync_voter v;
    memset(&v, 0, sizeof v);
    v.id = id;
    v.revision = 5;
    v.strategy = (uint8_t)strategy;
    v.hash_type = ECCL_HASH_SIMPLE;
    v.newcomer = 1;
    v.keys = k;
    v.n_keys = 2;
    return v;
}

#define EP ECCL_SYNC_ENFORCE_POPULAR
#define SO ECCL_SYNC_SEND_ONLY
#define RO ECCL_SYNC_RECEIVE_ONLY

static void test_majority_and_spread(void **state)
{
    (void)state;
    eccl_sync_voter v[5] = {voter(1, A, EP), voter(2, B, EP), voter(3, A, EP), voter(4, C, EP),
                            voter(5, A, EP)};
    eccl_sync_election e;
    assert_int_equal(eccl_sync_elect(v, 5, 0, 0, &e), ECCL_OK);
    assert_int_equal(e.elected, 0);
    assert_int_equal(e.revision, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(v[i].result, ECCL_OK);
    assert_true(v[0].source && v[2].source && v[4].source);
    assert_false(v[1].source || v[3].source);
    /* B lacks "w"; C lacks both: 3 fetches, sorted by (peer, key), spread
     * by bytes over the three holders. */
    assert_int_equal(e.n_fetch, 3);
    assert_int_equal(e.fetch[0].peer, 1);
    assert_int_equal(e.fetch[0].key, 1);
    assert_int_equal(e.fetch[0].hash, 100);
    assert_int_equal(e.fetch[1].peer, 3);
    assert_int_equal(e.fetch[1].key, 0);
    assert_int_equal(e.fetch[2].peer, 3);
    assert_int_equal(e.fetch[2].key, 1);
    assert_int_not_equal(e.fetch[0].src, e.fetch[1].src);
    assert_int_not_equal(e.fetch[0].src, e.fetch[2].src);
    assert_int_not_equal(e.fetch[1].src, e.fetch[2].src);
    for (uint32_t i = 0; i < e.n_fetch; i++) assert_true(v[e.fetch[i].src].source);
    eccl_sync_election_free(&e);
}

/* Joiners holding the initial state outnumber the group: the group's state
 * wins anyway, and the joiners fetch it (they once outvoted it, and a
 * 1,000-rank churn run went back a revision). */
static void test_newcomers_never_outvote_members(void **state)
{
    (void)state;
    eccl_sync_voter v[5] = {voter(1, A, EP), voter(2, A, EP), voter(3, B, EP), voter(4, B, EP),
                            voter(5, B, EP)};
    v[0].newcomer = v[1].newcomer = 0;
    v[0].revision = v[1].revision = 11;
    v[2].revision = v[3].revision = v[4].revision = 0;
    eccl_sync_election e;
    assert_int_equal(eccl_sync_elect(v, 5, 1, 10, &e), ECCL_OK);
    assert_true(v[0].elected && v[1].elected);
    assert_int_equal(e.revision, 11);
    assert_int_equal(e.n_fetch, 3);
    for (uint32_t i = 0; i < e.n_fetch; i++) assert_true(e.fetch[i].peer >= 2);
    eccl_sync_election_free(&e);
    /* Members that cannot vote (receive only) leave the vote to the
     * newcomers: somebody must decide. */
    v[0].strategy = v[1].strategy = RO;
    assert_int_equal(eccl_sync_elect(v, 5, 1, 10, &e), ECCL_OK);
    assert_true(v[2].elected && v[3].elected && v[4].elected);
    eccl_sync_election_free(&e);
}

static void test_tie_lowest_id(void **state)
{
    (void)state;
    eccl_sync_voter v[4] = {voter(9, B, EP), voter(3, A, EP), voter(7, B, EP), voter(4, A, EP)};
    eccl_sync_election e;
    assert_int_equal(eccl_sync_elect(v, 4, 0, 0, &e), ECCL_OK);
    assert_true(v[1].elected && v[3].elected); /* A holds id 3 */
    assert_int_equal(e.n_fetch, 2);
    eccl_sync_election_free(&e);
}

static void test_revision_rule(void **state)
{
    (void)state;
    eccl_sync_voter v[4] = {voter(1, A, EP), voter(2, A, EP), voter(3, A, EP), voter(4, B, EP)};
    v[0].newcomer = v[1].newcomer = v[2].newcomer = 0;
    v[0].revision = v[1].revision = 11;
    v[2].revision = 13; /* jumped */
    v[3].revision = 99; /* newcomer: free */
    eccl_sync_election e;
    assert_int_equal(eccl_sync_elect(v, 4, 1, 10, &e), ECCL_OK);
    assert_int_equal(v[2].result, ECCL_ERR_INVALID_ARG);
    assert_int_equal(v[0].result, ECCL_OK);
    assert_int_equal(v[3].result, ECCL_OK);
    assert_int_equal(e.revision, 11); /* the old peers', not the newcomer's */
    assert_int_equal(e.n_fetch, 1);
    assert_int_equal(e.fetch[0].peer, 3);
    eccl_sync_election_free(&e);
    /* Newcomers alone: the highest voting revision. */
    eccl_sync_voter w[2] = {voter(1, A, EP), voter(2, A, RO)};
    w[0].revision = 4;
    w[1].revision = 40;
    assert_int_equal(eccl_sync_elect(w, 2, 1, 10, &e), ECCL_OK);
    assert_int_equal(e.revision, 4);
    eccl_sync_election_free(&e);
}

static void test_strategies(void **state)
{
    (void)state;
    /* Receivers do not vote: two senders beat three receivers. */
    eccl_sync_voter v[5] = {voter(1, A, SO), voter(2, A, SO), voter(3, B, RO), voter(4, B, RO),
                            voter(5, B, RO)};
    eccl_sync_election e;
    assert_int_equal(eccl_sync_elect(v, 5, 0, 0, &e), ECCL_OK);
    assert_int_equal(e.elected, 0);
    assert_int_equal(e.n_fetch, 3);
    for (int i = 2; i < 5; i++) assert_false(v[i].source);
    eccl_sync_election_free(&e);
    /* A receiver in the elected class is up to date but never a source. */
    eccl_sync_voter u[2] = {voter(1, A, EP), voter(2, A, RO)};
    assert_int_equal(eccl_sync_elect(u, 2, 0, 0, &e), ECCL_OK);
    assert_true(u[1].elected && !u[1].source);
    eccl_sync_election_free(&e);
    /* An outvoted sender is kicked. */
    eccl_sync_voter k[3] = {voter(1, A, EP), voter(2, A, EP), voter(3, B, SO)};
    assert_int_equal(eccl_sync_elect(k, 3, 0, 0, &e), ECCL_OK);
    assert_int_equal(k[2].result, ECCL_ERR_KICKED);
    assert_int_equal(e.n_fetch, 0);
    eccl_sync_election_free(&e);
    /* Nobody votes. */
    eccl_sync_voter r[2] = {voter(1, A, RO), voter(2, B, RO)};
    assert_int_equal(eccl_sync_elect(r, 2, 0, 0, &e), ECCL_OK);
    assert_int_equal(e.elected, UINT32_MAX);
    assert_int_equal(r[0].result, ECCL_ERR_INVALID_ARG);
    assert_int_equal(r[1].result, ECCL_ERR_INVALID_ARG);
}

static void test_incompatible(void **state)
{
    (void)state;
    eccl_wire_sync_key big[2] = {A[0], A[1]}, named[2] = {A[0], A[1]};
    big[1].bytes = 8192;
    big[1].hash = 1;
    strcpy(named[1].key, "x");
    eccl_sync_voter v[5] = {voter(1, A, EP), voter(2, A, EP), voter(3, big, EP),
                            voter(4, named, EP), voter(5, B, EP)};
    v[4].hash_type = ECCL_HASH_CRC32C;
    eccl_sync_election e;
    assert_int_equal(eccl_sync_elect(v, 5, 0, 0, &e), ECCL_OK);
    assert_int_equal(v[2].result, ECCL_ERR_INVALID_ARG);
    assert_int_equal(v[3].result, ECCL_ERR_INVALID_ARG);
    assert_int_equal(v[4].result, ECCL_ERR_INVALID_ARG);
    assert_int_equal(e.n_fetch, 0);
    /* One key less is no more compatible. */
    eccl_sync_voter w[3] = {voter(1, A, EP), voter(2, A, EP), voter(3, A, EP)};
    w[2].n_keys = 1;
    assert_int_equal(eccl_sync_elect(w, 3, 0, 0, &e), ECCL_OK);
    assert_int_equal(w[2].result, ECCL_ERR_INVALID_ARG);
    /* Nobody at all. */
    assert_int_equal(eccl_sync_elect(NULL, 0, 0, 0, &e), ECCL_OK);
    assert_int_equal(e.elected, UINT32_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_majority_and_spread),
        cmocka_unit_test(test_newcomers_never_outvote_members),
        cmocka_unit_test(test_tie_lowest_id),
        cmocka_unit_test(test_revision_rule),
        cmocka_unit_test(test_strategies),
        cmocka_unit_test(test_incompatible),
    };
    return cmocka_run_group_tests_name("sync_elect", tests, NULL, NULL);
}
