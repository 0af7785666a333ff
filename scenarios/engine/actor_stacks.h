/* Guard-less actor stacks from one reserved region (actor_stacks.c).
 *
 * Past what vm.max_map_count allows, eccl-sim gives SimGrid's actors stacks
 * without guard pages, which SimGrid callocs. glibc serves each as a mapping
 * of its own with its 16-byte chunk header in the first page, so the stack's
 * top lies 16 bytes into the mapping's last page, where SimGrid's context
 * starts: two resident pages a rank that hold 32 bytes, of the four a rank's
 * stack keeps (the top page and one below it are the rank's frames). From
 * the pool, a stack is a page-aligned slice of one region: no header, no
 * spilled top, one memory map for all of them.
 */
#ifndef ECCL_SCN_ACTOR_STACKS_H
#define ECCL_SCN_ACTOR_STACKS_H

#include <stddef.h>

/* From now on, every calloc of exactly `stack_bytes` (a multiple of the page
 * size) takes a slice of a region of `count` of them, reserved (address
 * space only) here; free gives it back, its pages returned to the system.
 * Past `count` slices, or for any other size, calloc is malloc's. Call once,
 * before the actors start. 0, or -1 (nothing changed) when the region
 * cannot be reserved or the pool is already set. */
int eccl_actor_stacks_reserve(size_t stack_bytes, size_t count);

#endif
