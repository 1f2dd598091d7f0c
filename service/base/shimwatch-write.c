/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <unistd.h>

#include "shimwatch-write.h"

gboolean
shimwatch_write_all (int         fd,
                     const void *data,
                     gsize       length)
{
  const char *p = data;

  while (length > 0)
    {
      gssize n = write (fd, p, length);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return FALSE;
      if (n == 0)
        {
          errno = EIO;
          return FALSE;
        }
      p += n;
      length -= (gsize) n;
    }
  return TRUE;
}
