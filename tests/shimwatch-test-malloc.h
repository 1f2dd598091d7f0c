/* SPDX-License-Identifier: Apache-2.0
 *
 * For tests that count the allocations a code path makes on its thread: the test
 * executable's own malloc(), calloc() and realloc(), which come before libc's for every
 * library of the process (GLib's g_malloc() too), count while the thread sets
 * malloc_counting. Defined (SHIMWATCH_TEST_MALLOC_COUNT) only outside a sanitizer build,
 * whose runtime has its own. valgrind replaces these too: nothing is counted there (a
 * test checks that its count moved before it judges it). Include it in one file of a
 * test executable.
 */
#pragma once

#include <stddef.h>
#include <glib.h>

#if defined(__has_feature)
# if __has_feature(address_sanitizer)
#  define SHIMWATCH_TEST_NO_MALLOC_COUNT 1
# endif
#endif
#if !defined(__SANITIZE_ADDRESS__) && !defined(SHIMWATCH_TEST_NO_MALLOC_COUNT)
# define SHIMWATCH_TEST_MALLOC_COUNT 1
extern void *__libc_malloc (size_t size);
extern void *__libc_calloc (size_t n, size_t size);
extern void *__libc_realloc (void *memory, size_t size);
static __thread gboolean malloc_counting;
static __thread guint n_mallocs;     /* malloc(), calloc() and realloc() */

void *malloc (size_t size);
void *calloc (size_t n, size_t size);
void *realloc (void *memory, size_t size);

void *
malloc (size_t size)
{
  if (malloc_counting)
    n_mallocs++;
  return __libc_malloc (size);
}

void *
calloc (size_t n,
        size_t size)
{
  if (malloc_counting)
    n_mallocs++;
  return __libc_calloc (n, size);
}

void *
realloc (void   *memory,
         size_t  size)
{
  if (malloc_counting)
    n_mallocs++;
  return __libc_realloc (memory, size);
}
#endif
