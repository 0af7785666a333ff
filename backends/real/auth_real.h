/* The real backend's authentication: the job's secret and the MAC over it
 * (core/proto/auth.h says what the handshake does with them). */
#ifndef ECCL_BACKENDS_REAL_AUTH_REAL_H
#define ECCL_BACKENDS_REAL_AUTH_REAL_H

#include <stddef.h>

#include "env.h"

#define ECCL_AUTH_SECRET_MIN 16u   /* bytes */
#define ECCL_AUTH_SECRET_MAX 4096u /* bytes, the terminating room included */

typedef struct eccl_real_auth eccl_real_auth;

extern const eccl_auth_ops eccl_real_auth_ops;

/* The secret this process's settings name: ECCL_AUTH_SECRET_FILE (a file
 * only its owner may read or write) or ECCL_AUTH_SECRET, trailing line ends
 * and blanks dropped, at least ECCL_AUTH_SECRET_MIN bytes. *out NULL with
 * ECCL_OK where ECCL_AUTH=0 turns authentication off. ECCL_ERR_AUTH, with an
 * ERROR line through env, for no secret, both set, or one unusable. */
eccl_result eccl_real_auth_create(eccl_env *env, eccl_real_auth **out);
void eccl_real_auth_free(eccl_real_auth *a);

#endif
