/* A program outside the project that finds an installed eccl the way users
 * will (pkg-config or find_package) and calls into the library. */
#include <eccl.h>
#include <stdio.h>

int main(void)
{
    const char *ok = eccl_strerror(ECCL_OK);
    size_t f32 = eccl_dtype_size(ECCL_F32);

    if (ok == NULL || f32 != 4) {
        fprintf(stderr, "consumer: eccl_strerror(ECCL_OK)=%s eccl_dtype_size(ECCL_F32)=%zu\n",
                ok ? ok : "(null)", f32);
        return 1;
    }
    printf("consumer: eccl %d.%d.%d: ECCL_OK is \"%s\", ECCL_F32 is %zu bytes\n", ECCL_VERSION_MAJOR,
           ECCL_VERSION_MINOR, ECCL_VERSION_PATCH, ok, f32);
    return 0;
}
