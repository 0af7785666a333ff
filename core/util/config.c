#include "util/config.h"

#include <inttypes.h>

#include "util/log.h"

uint64_t eccl_config_uint(const eccl_env *env, const char *name, uint64_t lo, uint64_t hi,
                          uint64_t def)
{
    char v[32];
    if (!eccl_config_get(env, name, v, sizeof v) || !v[0]) return def;
    uint64_t n = 0;
    int ok = 1;
    for (const char *s = v; *s && ok; s++) {
        unsigned d = (unsigned)(*s - '0');
        ok = d <= 9 && n <= (UINT64_MAX - d) / 10;
        n = n * 10 + d;
    }
    if (ok && n >= lo && n <= hi) return n;
    ECCL_WARN(env, "%s=\"%s\" is not a number in %" PRIu64 "..%" PRIu64 "; using %" PRIu64, name,
              v, lo, hi, def);
    return def;
}
