/* Does the libibverbs.so.1 that LD_LIBRARY_PATH picks (the mock, under
 * ctest) export every verb net_ibv dlsym()s? net_ibv only finds out when it
 * loads, and then reports "no RDMA", which tests would take for a machine
 * without a NIC rather than for a gap in the mock. Prints the library's
 * path so the test can insist it was the mock that was checked. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

#include "net_ibv.h"

int main(void) {
  /* The same flags as net_ibv: a symbol it would not resolve is missing. */
  void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "check_ibv_covers: cannot load libibverbs.so.1: %s\n", dlerror());
    return 1;
  }
  struct link_map *loaded = NULL;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &loaded) || !loaded) {
    fprintf(stderr, "check_ibv_covers: cannot tell which libibverbs.so.1 was loaded: %s\n", dlerror());
    return 1;
  }
  int verbs = 0, missing = 0;
  for (const char *const *name = eccl_net_ibv_symbols; *name; name++, verbs++) {
    if (!dlsym(lib, *name)) {
      printf("missing: %s\n", *name);
      missing++;
    }
  }
  if (missing) {
    printf("net_ibv: %d of %d verbs missing from %s\n", missing, verbs, loaded->l_name);
    return 1;
  }
  printf("net_ibv: all %d verbs present in %s\n", verbs, loaded->l_name);
  return 0;
}
