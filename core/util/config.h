/* Numeric settings from the env's config table (core/env.h): a deployment
 * knob that overrides a default without a rebuild. */
#ifndef ECCL_CORE_UTIL_CONFIG_H
#define ECCL_CORE_UTIL_CONFIG_H

#include <stdint.h>

#include "env.h"

/* Setting `name` as a decimal integer in [lo, hi]; `def` if it is not set.
 * A value that is set but is not such a number is ignored with a warning
 * naming it, so a typo never goes unnoticed nor takes effect. */
uint64_t eccl_config_uint(const eccl_env *env, const char *name, uint64_t lo, uint64_t hi,
                          uint64_t def);

#endif
