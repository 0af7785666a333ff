/* Linked against rdma-core's libibverbs.so.1 (not the mock): run with
 * LD_LIBRARY_PATH pointing at the mock, every versioned reference
 * (ibv_get_device_list@IBVERBS_1.1, ...) must bind to the mock. */
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  int n = 0;
  struct ibv_device **l = ibv_get_device_list(&n);
  const char *want = getenv("ECCL_MOCK_IBV_DEVICES"); /* the test sets 2 */
  if (!l || n < 1 || (want && n != atoi(want)) || strcmp(ibv_get_device_name(l[n - 1]), n == 2 ? "mock_ibv1" : "mock_ibv0") ||
      strcmp(ibv_get_device_name(l[0]), "mock_ibv0") != 0) {
    fprintf(stderr, "bind_check: not the mock (%d devices)\n", n);
    return 1;
  }
  struct ibv_context *c = ibv_open_device(l[0]);
  ibv_free_device_list(l);
  struct ibv_port_attr pa;
  Dl_info dl;
  if (!c || ibv_query_port(c, 1, &pa) || pa.state != IBV_PORT_ACTIVE || !dladdr((void *)ibv_open_device, &dl)) {
    fprintf(stderr, "bind_check: open/query failed\n");
    return 1;
  }
  ibv_close_device(c);
  printf("bind_check: %s\n", dl.dli_fname);
  return 0;
}
