/* Shared by the command-line tools: argument parsing, bringing a world of
 * peers up, and launching local rank processes (eccl-bench --np, eccl-run;
 * libeccl_mpi's MPI_Init admits its world with tool_admit_world too). */
#ifndef ECCL_TOOL_UTIL_H
#define ECCL_TOOL_UTIL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "eccl.h"

/* Parses a decimal byte count with an optional K, M, G or T suffix (either
 * case, powers of 1024, as nccl-tests reads -b/-e): "8", "256K", "64M", "1G".
 * Returns 0, or -1 for anything else, including overflow. */
int tool_parse_size(const char *text, size_t *out);

/* Parses a plain decimal integer in [min, max]. Returns 0 or -1. */
int tool_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out);

/* Accepts "HOST:PORT" or "[IPV6]:PORT" with a non-empty host and PORT in
 * 0..65535. Checks the shape only; resolving is the library's business.
 * Returns 0 or -1. */
int tool_check_hostport(const char *text);

/* Every accepted peer must vote on each topology update, so every member of
 * a world being brought up runs this same loop (pending peers are voted in
 * with eccl_comm_update_topology) until the group holds at least `world`
 * peers. The ring is then in admission order, the same on every peer.
 * *accepted (may be NULL) gets the world size last seen, also on failure.
 * ECCL_ERR_TIMEOUT after timeout_ms; otherwise the first failing call's
 * result. */
eccl_result tool_admit_world(eccl_comm *comm, int64_t world, uint64_t timeout_ms,
                             int64_t *accepted);

/* Starts n processes running `file` (a path, or with search_path a name
 * looked up in PATH as the shell does) with arguments argv (argv[0]
 * included, NULL-terminated) and this process's environment, pids[i] set
 * for each. Each child dies with SIGKILL if the launcher does
 * (PR_SET_PDEATHSIG): a rank has nobody to report to once its launcher is
 * gone, and must not linger. A child that cannot exec is reported here,
 * with the reason, and nothing is left running: returns -1 after stopping
 * and reaping the ones already started, 0 otherwise. `who` prefixes every
 * message ("eccl-run"). */
int tool_spawn(const char *who, const char *file, char *const argv[], int search_path,
               pid_t *pids, size_t n);

/* Reaps the n processes tool_spawn started. Each one that fails (non-zero
 * status or a signal, but not the signal this function sent it) is
 * reported on stderr with its index and pid. The first failure seen stops
 * the others: SIGTERM, then SIGKILL for those still alive
 * TOOL_STOP_GRACE_MS later (a rank waiting for a lost peer would otherwise
 * sit out its own timeout). They are stopped the same way once timeout_ms
 * passes (0: no limit; otherwise nothing is waited for longer than
 * timeout_ms + TOOL_STOP_GRACE_MS) or once *stop (may be NULL; a signal
 * handler stores its signal number there) is non-zero. Returns 0 when
 * every process exited with status 0; otherwise the status a launcher
 * should exit with: the first failure's exit status, or 128 + its signal;
 * 124 after a timeout; 128 + *stop when stopped. With keep_going, a failed
 * process does not stop the others: each is reported as it ends, and the
 * status is then the number of processes that failed (at most 100). */
#define TOOL_STOP_GRACE_MS 5000
int tool_reap(const char *who, pid_t *pids, size_t n, uint64_t timeout_ms, int keep_going,
              volatile sig_atomic_t *stop);

#endif /* ECCL_TOOL_UTIL_H */
