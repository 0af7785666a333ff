/* GET /metrics for eccl-master on libmicrohttpd (Debian's libmicrohttpd-dev):
 * its own thread, a few connections at a time, each given a few seconds:
 * a scraper's endpoint, not a web server, and no hostile client keeps it
 * busy for long. Everything else is 404 (405 for a method but GET). */
#include "metrics_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef ECCL_HAVE_MICROHTTPD
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#define METRICS_CONNECTIONS 16u
#define METRICS_TIMEOUT_S 5u

struct metrics_http {
    struct MHD_Daemon *d;
    eccl_master *master;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type, char *body,
                             size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result serve(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                             const char *version, const char *upload, size_t *upload_size, void **state)
{
    metrics_http *h = cls;
    (void)version, (void)upload, (void)state;
    if (*upload_size) return MHD_NO; /* GET has no body */
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0)
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "GET only\n", 9, MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/metrics") != 0)
        return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain", "not found: try /metrics\n", 24,
                     MHD_RESPMEM_PERSISTENT);
    size_t len = 16384, needed = 0;
    for (int tries = 0; tries < 4; tries++) {
        char *buf = malloc(len);
        if (!buf) break;
        eccl_result rc = eccl_master_metrics(h->master, buf, len, &needed);
        if (rc == ECCL_OK)
            return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", buf, needed - 1,
                         MHD_RESPMEM_MUST_FREE);
        free(buf);
        if (rc != ECCL_ERR_INVALID_ARG || needed <= len) break;
        len = needed;
    }
    return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", "no memory\n", 10, MHD_RESPMEM_PERSISTENT);
}

int metrics_http_start(const char *hostport, eccl_master *master, metrics_http **out, unsigned *port)
{
    const char *colon = strrchr(hostport, ':');
    char host[64];
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (!colon || (size_t)(colon - hostport) >= sizeof host) {
        fprintf(stderr, "eccl-master: --metrics wants HOST:PORT, got '%s'\n", hostport);
        return -1;
    }
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = 0;
    char *end;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (*end || p > 65535 || inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "eccl-master: --metrics wants an IPv4 HOST:PORT, got '%s'\n", hostport);
        return -1;
    }
    sa.sin_port = htons((uint16_t)p);
    metrics_http *h = calloc(1, sizeof *h);
    if (!h) return -1;
    h->master = master;
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, serve, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT,
                            METRICS_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT, METRICS_TIMEOUT_S,
                            MHD_OPTION_END);
    if (!h->d) {
        fprintf(stderr, "eccl-master: --metrics %s: cannot listen there\n", hostport);
        free(h);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? info->port : (unsigned)p;
    *out = h;
    return 0;
}

void metrics_http_stop(metrics_http *h)
{
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}

#else /* a build without libmicrohttpd */

int metrics_http_start(const char *hostport, eccl_master *master, metrics_http **out, unsigned *port)
{
    (void)hostport, (void)master, (void)out, (void)port;
    fprintf(stderr, "eccl-master: --metrics: this build has no libmicrohttpd (apt-get install "
                    "libmicrohttpd-dev, then rebuild)\n");
    return -1;
}

void metrics_http_stop(metrics_http *h)
{
    (void)h;
}

#endif
