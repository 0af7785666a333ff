/* Parsing of dtype and op names, for command-line tools and config files.
 * (eccl_strerror, eccl_dtype_size, eccl_dtype_name and eccl_op_name, which
 * types.c also defines, are declared in eccl.h.) */
#ifndef ECCL_CORE_UTIL_TYPES_H
#define ECCL_CORE_UTIL_TYPES_H

#include "eccl.h"

/* Accepts the names eccl_dtype_name returns ("f32", "bf16", ...) and the
 * common spellings "float", "float32", "double", "half", "bfloat16", "int".
 * Case-sensitive. Returns 0 and sets *out, or -1 (NULL s or out, unknown
 * name) leaving *out untouched. */
int eccl_dtype_parse(const char *s, eccl_dtype *out);

/* Accepts the names eccl_op_name returns ("sum", "avg", "prod", "min",
 * "max"). Same contract as eccl_dtype_parse. */
int eccl_op_parse(const char *s, eccl_op *out);

#endif /* ECCL_CORE_UTIL_TYPES_H */
