/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <unistd.h>

#include "shimwatch-caller.h"

struct _ShimwatchCaller
{
  guint32  uid;
  gid_t   *groups;
  int      n_groups;
};

ShimwatchCaller *
shimwatch_caller_new (guint32  uid,
                      GArray  *gids)
{
  ShimwatchCaller *caller = g_new0 (ShimwatchCaller, 1);
  long size = sysconf (_SC_GETPW_R_SIZE_MAX);
  gsize buffer_size = size > 0 ? (gsize) size : 16384;
  g_autofree char *buffer = NULL;
  struct passwd pw;
  struct passwd *found = NULL;

  caller->uid = uid;
  if (uid == 0)
    return caller;
  if (gids != NULL)
    {
      caller->n_groups = (int) gids->len;
      caller->groups = g_new (gid_t, MAX (gids->len, 1));
      for (guint i = 0; i < gids->len; i++)
        caller->groups[i] = (gid_t) g_array_index (gids, guint32, i);
      return caller;
    }
  buffer = g_malloc (buffer_size);
  if (getpwuid_r ((uid_t) uid, &pw, buffer, buffer_size, &found) != 0 || found == NULL)
    return caller;      /* a uid without a user: its own bits and "other" only */
  caller->n_groups = 32;
  caller->groups = g_new (gid_t, caller->n_groups);
  if (getgrouplist (pw.pw_name, pw.pw_gid, caller->groups, &caller->n_groups) < 0)
    {
      caller->groups = g_renew (gid_t, caller->groups, caller->n_groups);
      if (getgrouplist (pw.pw_name, pw.pw_gid, caller->groups, &caller->n_groups) < 0)
        caller->n_groups = 0;
    }
  return caller;
}

void
shimwatch_caller_free (ShimwatchCaller *caller)
{
  if (caller == NULL)
    return;
  g_free (caller->groups);
  g_free (caller);
}

guint32
shimwatch_caller_get_uid (const ShimwatchCaller *caller)
{
  return caller->uid;
}

gboolean
shimwatch_caller_may (const ShimwatchCaller *caller,
                      const struct stat     *st,
                      int                    want)
{
  mode_t bits = st->st_mode & 7;

  if (caller->uid == 0)
    return TRUE;
  if (st->st_uid == caller->uid)
    bits = (st->st_mode >> 6) & 7;
  else
    for (int i = 0; i < caller->n_groups; i++)
      if (caller->groups[i] == st->st_gid)
        {
          bits = (st->st_mode >> 3) & 7;
          break;
        }
  return ((int) bits & want) == want;
}

gboolean
shimwatch_caller_can_reach (const ShimwatchCaller  *caller,
                            const char             *path,
                            char                  **blocked)
{
  g_autofree char *dir = g_path_get_dirname (path);

  if (caller->uid == 0)
    return TRUE;
  while (TRUE)
    {
      struct stat st;
      char *parent;

      if (stat (dir, &st) != 0 || !shimwatch_caller_may (caller, &st, X_OK))
        {
          if (blocked != NULL)
            *blocked = g_steal_pointer (&dir);
          return FALSE;
        }
      if (strcmp (dir, "/") == 0 || strcmp (dir, ".") == 0)
        return TRUE;
      parent = g_path_get_dirname (dir);
      g_free (dir);
      dir = parent;
    }
}
