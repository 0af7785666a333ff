/* Argument parsing shared by the command-line tools. */
#ifndef ECCL_TOOL_UTIL_H
#define ECCL_TOOL_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Parses a decimal byte count with an optional K, M, G or T suffix (either
 * case, powers of 1024, as nccl-tests reads -b/-e): "8", "256K", "64M", "1G".
 * Returns 0, or -1 for anything else, including overflow. */
int tool_parse_size(const char *text, size_t *out);

/* Parses a plain decimal integer in [min, max]. Returns 0 or -1. */
int tool_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out);

/* Accepts "HOST:PORT" or "[IPV6]:PORT" with a non-empty host and PORT in
 * 0..65535. Checks the shape only; resolving is the library's business.
 * Returns 0 or -1. */
int tool_check_hostport(const char *text);

#endif /* ECCL_TOOL_UTIL_H */
