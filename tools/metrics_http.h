/* eccl-master's --metrics: the master's metrics (eccl_master_metrics, in
 * Prometheus' text format) served over HTTP by libmicrohttpd. */
#ifndef ECCL_TOOLS_METRICS_HTTP_H
#define ECCL_TOOLS_METRICS_HTTP_H

#include "eccl.h"

typedef struct metrics_http metrics_http;

/* Serves GET /metrics on hostport (an IPv4 address; port 0 picks one, set
 * in *port). 0, or -1 with the reason on stderr (a build without
 * libmicrohttpd, an address that does not bind). */
int metrics_http_start(const char *hostport, eccl_master *master, metrics_http **out, unsigned *port);
void metrics_http_stop(metrics_http *h);

#endif /* ECCL_TOOLS_METRICS_HTTP_H */
