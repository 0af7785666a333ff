/* The public constructors of the real library: each master or communicator
 * gets its own POSIX env (its own epoll instance and wake-up eventfd). */
#include "eccl_core.h"
#include "env_real.h"

eccl_result eccl_master_create(const char *listen_addr, eccl_master **out)
{
    eccl_env *env = NULL;
    eccl_result rc = eccl_env_real_create("master", 0, &env);
    if (rc != ECCL_OK) return rc;
    return eccl_master_create_with_env(env, eccl_env_real_destroy, listen_addr, out);
}

eccl_result eccl_relay_create(const char *listen_addr, const char *parent_addr,
                              eccl_relay **out)
{
    eccl_env *env = NULL;
    eccl_result rc = eccl_env_real_create("relay", 0, &env);
    if (rc != ECCL_OK) return rc;
    return eccl_relay_create_with_env(env, eccl_env_real_destroy, listen_addr, parent_addr, out);
}

eccl_result eccl_comm_create(const eccl_comm_params *params, eccl_comm **out)
{
    eccl_env *env = NULL;
    eccl_result rc = eccl_env_real_create("peer", 1, &env);
    if (rc != ECCL_OK) return rc;
    return eccl_comm_create_with_env(env, eccl_env_real_destroy, params, out);
}
