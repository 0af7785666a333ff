#include "tool_util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* strtoull alone accepts leading blanks, a sign and "-1" (wrapping to
 * ULLONG_MAX); a command line that says "-e -1" must be rejected instead. */
static int parse_digits(const char *text, unsigned long long *value, char **end)
{
    if (text == NULL || !isdigit((unsigned char)text[0]))
        return -1;
    errno = 0;
    *value = strtoull(text, end, 10);
    return errno == 0 ? 0 : -1;
}

int tool_parse_size(const char *text, size_t *out)
{
    unsigned long long value;
    char *end;
    unsigned shift = 0;

    if (parse_digits(text, &value, &end) != 0)
        return -1;
    switch (*end) {
    case '\0':
        break;
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default:
        return -1;
    }
    if (shift != 0 && end[1] != '\0')
        return -1;
    if (value > (unsigned long long)SIZE_MAX >> shift)
        return -1;
    *out = (size_t)(value << shift);
    return 0;
}

int tool_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    unsigned long long value;
    char *end;

    if (parse_digits(text, &value, &end) != 0 || *end != '\0')
        return -1;
    if (value < min || value > max)
        return -1;
    *out = value;
    return 0;
}

int tool_check_hostport(const char *text)
{
    const char *colon;
    size_t host_len;
    uint64_t port;

    if (text == NULL)
        return -1;
    colon = strrchr(text, ':');
    if (colon == NULL)
        return -1;
    host_len = (size_t)(colon - text);
    if (host_len == 0)
        return -1;
    for (const char *p = text; p < colon; p++)
        if (isspace((unsigned char)*p))
            return -1;
    if (text[0] == '[') {
        /* Brackets are the only way an IPv6 host can carry its own colons. */
        if (host_len < 3 || colon[-1] != ']')
            return -1;
    } else if (memchr(text, ':', host_len) != NULL) {
        return -1;
    }
    /* At most five digits keeps "000080" style ports from looking valid. */
    if (strlen(colon + 1) > 5)
        return -1;
    return tool_parse_u64(colon + 1, 0, 65535, &port);
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(long ms)
{
    const struct timespec pause = {0, ms * 1000000L};

    nanosleep(&pause, NULL);
}

eccl_result tool_admit_world(eccl_comm *comm, int64_t world, uint64_t timeout_ms,
                             int64_t *accepted)
{
    uint64_t deadline = now_ms() + timeout_ms;
    int64_t have = 0;
    uint32_t pending;
    eccl_result rc;

    for (;;) {
        rc = eccl_comm_get_attr(comm, ECCL_ATTR_WORLD_SIZE, &have);
        if (rc != ECCL_OK || have >= world)
            break;
        if (now_ms() >= deadline) {
            rc = ECCL_ERR_TIMEOUT;
            break;
        }
        rc = eccl_comm_peers_pending(comm, &pending);
        if (rc != ECCL_OK)
            break;
        if (pending > 0) {
            rc = eccl_comm_update_topology(comm);
            if (rc != ECCL_OK)
                break;
        } else {
            sleep_ms(1);
        }
    }
    if (accepted != NULL)
        *accepted = have;
    return rc;
}

/* SIGKILL and reap: these children never got to do anything yet. */
static void abandon_children(pid_t *pids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (pids[i] > 0)
            kill(pids[i], SIGKILL);
    for (size_t i = 0; i < n; i++)
        if (pids[i] > 0) {
            while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
                ;
            pids[i] = 0;
        }
}

int tool_spawn(const char *who, const char *file, char *const argv[], int search_path,
               pid_t *pids, size_t n)
{
    pid_t launcher = getpid();

    for (size_t i = 0; i < n; i++)
        pids[i] = 0;
    /* Buffered output would otherwise be written once per child as well. */
    fflush(stdout);
    fflush(stderr);
    for (size_t i = 0; i < n; i++) {
        /* The child writes its exec errno here; a pipe closed empty by
         * O_CLOEXEC means the exec succeeded. */
        int report[2], err;
        ssize_t got;
        pid_t pid;

        if (pipe2(report, O_CLOEXEC) != 0) {
            fprintf(stderr, "%s: pipe: %s\n", who, strerror(errno));
            abandon_children(pids, i);
            return -1;
        }
        pid = fork();
        if (pid < 0) {
            fprintf(stderr, "%s: fork: %s\n", who, strerror(errno));
            close(report[0]);
            close(report[1]);
            abandon_children(pids, i);
            return -1;
        }
        if (pid == 0) {
            /* Exec at once: the launcher's threads (an in-process master)
             * did not survive the fork, so nothing that may take a lock
             * until exec (glibc's execvp searches PATH on the stack). The
             * getppid check closes the race with a launcher that died
             * before prctl. */
            close(report[0]);
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher)
                _exit(127);
            if (search_path)
                execvp(file, argv);
            else
                execv(file, argv);
            err = errno;
            if (write(report[1], &err, sizeof err) < 0)
                _exit(127);
            _exit(127);
        }
        pids[i] = pid;
        close(report[1]);
        do
            got = read(report[0], &err, sizeof err);
        while (got < 0 && errno == EINTR);
        close(report[0]);
        if (got == (ssize_t)sizeof err) {
            fprintf(stderr, "%s: cannot run %s: %s\n", who, file, strerror(err));
            abandon_children(pids, i + 1);
            return -1;
        }
    }
    return 0;
}

static size_t signal_children(const pid_t *pids, size_t n, int sig)
{
    size_t alive = 0;

    for (size_t i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], sig);
            alive++;
        }
    return alive;
}

int tool_reap(const char *who, pid_t *pids, size_t n, uint64_t timeout_ms, int keep_going,
              volatile sig_atomic_t *stop)
{
    uint64_t start = now_ms(), kill_at = 0;
    int stopping = 0, killed = 0, result = 0, failed = 0;
    size_t left = 0;

    for (size_t i = 0; i < n; i++)
        left += pids[i] > 0;
    /* Polled rather than blocking in waitpid, so that the deadlines and
     * *stop are seen without signals reaching this thread (an in-process
     * master's threads may take them). */
    while (left > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);

        if (pid < 0 && errno == EINTR)
            continue;
        if (pid < 0) {
            /* ECHILD: someone else reaped them; nothing left to wait for. */
            fprintf(stderr, "%s: waitpid: %s\n", who, strerror(errno));
            return result != 0 ? result : 1;
        }
        if (pid > 0) {
            size_t i;

            for (i = 0; i < n && pids[i] != pid; i++)
                ;
            if (i == n)
                continue;
            pids[i] = 0;
            left--;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                continue;
            /* A death by the signal we sent is not news. Anything else
             * still is: a rank that failed on its own (on losing the first
             * one, say) tells why, and a SIGKILL before ours came from
             * elsewhere. */
            if (WIFSIGNALED(status) && ((stopping && WTERMSIG(status) == SIGTERM) ||
                                        (killed && WTERMSIG(status) == SIGKILL)))
                continue;
            if (WIFSIGNALED(status))
                fprintf(stderr, "%s: process %zu of %zu (pid %d) was killed by signal %d (%s)",
                        who, i, n, (int)pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
            else
                fprintf(stderr, "%s: process %zu of %zu (pid %d) exited with status %d",
                        who, i, n, (int)pid, WEXITSTATUS(status));
            if (!stopping && keep_going) {
                failed++;
                if (left > 0)
                    fprintf(stderr, "; the other %zu go on (--keep-going)", left);
            } else if (!stopping) {
                result = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
                if (left > 0)
                    fprintf(stderr, "; stopping the other %zu", left);
            }
            fputc('\n', stderr);
        } else if (!stopping && stop != NULL && *stop != 0) {
            result = 128 + *stop;
            fprintf(stderr, "%s: got signal %d (%s); stopping %zu processes\n", who,
                    (int)*stop, strsignal(*stop), left);
        } else if (!stopping && timeout_ms != 0 && now_ms() - start >= timeout_ms) {
            result = 124;
            fprintf(stderr, "%s: timed out after %" PRIu64 " ms; stopping %zu processes\n",
                    who, timeout_ms, left);
        } else if (stopping && !killed && now_ms() >= kill_at) {
            fprintf(stderr, "%s: %zu processes still running %d ms after SIGTERM; sending SIGKILL\n",
                    who, left, TOOL_STOP_GRACE_MS);
            signal_children(pids, n, SIGKILL);
            killed = 1;
        } else {
            sleep_ms(5);
            continue;
        }
        if (result != 0 && !stopping) {
            stopping = 1;
            kill_at = now_ms() + TOOL_STOP_GRACE_MS;
            signal_children(pids, n, SIGTERM);
        }
    }
    if (result == 0 && failed != 0) {
        fprintf(stderr, "%s: %d of %zu processes failed\n", who, failed, n);
        result = failed < 100 ? failed : 100;
    }
    return result;
}
