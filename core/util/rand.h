/* splitmix64 (Steele, Lea, Flood 2014): the project's one small seeded
 * generator, where a stream must be reproducible from a seed (the ring
 * solver's kicks, the chaos plan's draws, the scenario engine's choices). */
#ifndef ECCL_CORE_UTIL_RAND_H
#define ECCL_CORE_UTIL_RAND_H

#include <stdint.h>

static inline uint64_t eccl_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
