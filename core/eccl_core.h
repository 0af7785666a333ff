/* How a backend builds public objects around an env it owns. The backend's
 * eccl_master_create / eccl_comm_create make an env and call these; the
 * object calls env_release(env) when it is destroyed. */
#ifndef ECCL_CORE_ECCL_CORE_H
#define ECCL_CORE_ECCL_CORE_H

#include "env.h"

typedef void (*eccl_env_release_fn)(eccl_env *env);

eccl_result eccl_master_create_with_env(eccl_env *env, eccl_env_release_fn release,
                                        const char *listen_addr, eccl_master **out);
eccl_result eccl_relay_create_with_env(eccl_env *env, eccl_env_release_fn release,
                                       const char *listen_addr, const char *parent_addr,
                                       eccl_relay **out);
eccl_result eccl_comm_create_with_env(eccl_env *env, eccl_env_release_fn release,
                                      const eccl_comm_params *params, eccl_comm **out);

#endif
