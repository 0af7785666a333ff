/* Compiled, never run: proves include/eccl.h stands alone (included first,
 * nothing before it) and is clean C99 under -pedantic-errors, and, compiled
 * as C++, that C++ code can use it. Touches each kind of declaration so a
 * typo in any of them fails the build. */
#include "eccl.h"

#include "eccl.h" /* the include guard must hold */

typedef char eccl_check_version[(ECCL_VERSION_MAJOR >= 0 && ECCL_VERSION_MINOR >= 0) ? 1 : -1];

static eccl_result header_use(eccl_comm *comm, float *buf, size_t n)
{
    eccl_comm_params params;
    eccl_reduce_info info;
    eccl_request *req = NULL;
    eccl_master *master = NULL;
    eccl_dtype dtype = ECCL_F32;
    eccl_op op = ECCL_SUM;
    eccl_attr attr = ECCL_ATTR_WORLD_SIZE;
    int64_t value = 0;
    uint32_t pending = 0;
    uint64_t ids[1] = {0};
    int done = 0;
    char addr[64];
    eccl_result r;

    eccl_comm_params_init(&params);
    params.master_addr = "127.0.0.1:0";
    r = eccl_master_create(params.master_addr, &master);
    if (r == ECCL_OK)
        r = eccl_master_address(master, addr, sizeof addr);
    r = eccl_comm_get_attr(comm, attr, &value);
    r = eccl_comm_peers_pending(comm, &pending);
    r = eccl_comm_peer_ids(comm, 0, 1, ids);
    r = eccl_comm_pin_epoch(comm, 0);
    r = eccl_allreduce(comm, buf, buf, n, dtype, op, 7u, &info);
    r = eccl_allreduce_async(comm, buf, buf, n, dtype, op, 8u, &req);
    if (r == ECCL_OK)
        r = eccl_test(req, &done, NULL);
    if (r == ECCL_OK && !done)
        r = eccl_wait(req, &info);
    eccl_master_destroy(master);
    if (eccl_dtype_size(dtype) != sizeof(float) || eccl_strerror(r) == NULL ||
        eccl_dtype_name(dtype) == NULL || eccl_op_name(op) == NULL)
        return ECCL_ERR_INVALID_ARG;
    return r;
}

int main(void)
{
    return header_use(NULL, NULL, 0) == ECCL_OK ? 0 : 1;
}
