#include "tool_util.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* strtoull alone accepts leading blanks, a sign and "-1" (wrapping to
 * ULLONG_MAX); a command line that says "-e -1" must be rejected instead. */
static int parse_digits(const char *text, unsigned long long *value, char **end)
{
    if (text == NULL || !isdigit((unsigned char)text[0]))
        return -1;
    errno = 0;
    *value = strtoull(text, end, 10);
    return errno == 0 ? 0 : -1;
}

int tool_parse_size(const char *text, size_t *out)
{
    unsigned long long value;
    char *end;
    unsigned shift = 0;

    if (parse_digits(text, &value, &end) != 0)
        return -1;
    switch (*end) {
    case '\0':
        break;
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default:
        return -1;
    }
    if (shift != 0 && end[1] != '\0')
        return -1;
    if (value > (unsigned long long)SIZE_MAX >> shift)
        return -1;
    *out = (size_t)(value << shift);
    return 0;
}

int tool_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    unsigned long long value;
    char *end;

    if (parse_digits(text, &value, &end) != 0 || *end != '\0')
        return -1;
    if (value < min || value > max)
        return -1;
    *out = value;
    return 0;
}

int tool_check_hostport(const char *text)
{
    const char *colon;
    size_t host_len;
    uint64_t port;

    if (text == NULL)
        return -1;
    colon = strrchr(text, ':');
    if (colon == NULL)
        return -1;
    host_len = (size_t)(colon - text);
    if (host_len == 0)
        return -1;
    for (const char *p = text; p < colon; p++)
        if (isspace((unsigned char)*p))
            return -1;
    if (text[0] == '[') {
        /* Brackets are the only way an IPv6 host can carry its own colons. */
        if (host_len < 3 || colon[-1] != ']')
            return -1;
    } else if (memchr(text, ':', host_len) != NULL) {
        return -1;
    }
    /* At most five digits keeps "000080" style ports from looking valid. */
    if (strlen(colon + 1) > 5)
        return -1;
    return tool_parse_u64(colon + 1, 0, 65535, &port);
}
