/* net_tls: TLS 1.3 (OpenSSL) around the env's stream net, for links that
 * cross networks nobody vouches for (ECCL_TLS=psk|cert; docs/transports.md,
 * "TLS"). Every conn's bytes are encrypted and authenticated; bulk payloads
 * are off (they would bypass the stream), so payloads ride the stream.
 *   psk:  a pre-shared key derived from the job's secret (the handshake's
 *         MAC over a fixed label): no certificates to hand out;
 *   cert: mutual certificates, ECCL_TLS_CERT / ECCL_TLS_KEY (PEM) checked
 *         against ECCL_TLS_CA on both ends.
 * A peer that cannot complete the TLS handshake (another key, no TLS,
 * a certificate the CA did not sign) breaks the conn: send and recv return
 * ECCL_ERR_AUTH, with one line saying why. */
#ifndef ECCL_BACKENDS_REAL_NET_TLS_H
#define ECCL_BACKENDS_REAL_NET_TLS_H

#include "env.h"

/* Wraps env->net as chaos does (the ops and ctx are replaced, the inner
 * ones kept), per ECCL_TLS: "off"/unset leaves it as it is. ECCL_ERR_AUTH
 * (logged) for a mode it cannot set up: psk without the job's secret,
 * cert without readable files. */
eccl_result eccl_net_tls_wrap(eccl_env *env);
/* Whether ECCL_TLS asks for TLS (psk or cert): the net under it must then
 * be a plain stream (env_real.c's net_create). */
int eccl_net_tls_asked(const eccl_env *env);
/* Undoes the wrap (every conn already closed); nothing if not wrapped. */
void eccl_net_tls_unwrap(eccl_env *env);

#endif
