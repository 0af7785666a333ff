/* Where a buffer lives, as the env's dev table and the CUDA plugin report it. */
#ifndef ECCL_CORE_UTIL_MEM_KIND_H
#define ECCL_CORE_UTIL_MEM_KIND_H

typedef enum eccl_mem_kind {
    ECCL_MEM_HOST = 0,            /* ordinary host memory */
    ECCL_MEM_DEVICE = 1,          /* device memory: not host-addressable */
    ECCL_MEM_MANAGED = 2,         /* unified (managed) memory */
    ECCL_MEM_HOST_REGISTERED = 3  /* pinned or registered host memory */
} eccl_mem_kind;

#endif /* ECCL_CORE_UTIL_MEM_KIND_H */
