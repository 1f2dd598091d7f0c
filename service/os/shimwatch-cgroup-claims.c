/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <string.h>

#include "shimwatch-cgroup-claims.h"

struct _ShimwatchCgroupClaims
{
  GHashTable *owners;   /* claimed path → owner */
  GHashTable *below;    /* path → set of the claimed paths inside it */
};

ShimwatchCgroupClaims *
shimwatch_cgroup_claims_new (void)
{
  ShimwatchCgroupClaims *claims = g_new0 (ShimwatchCgroupClaims, 1);

  claims->owners = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  claims->below = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                         (GDestroyNotify) g_hash_table_unref);
  return claims;
}

void
shimwatch_cgroup_claims_free (ShimwatchCgroupClaims *claims)
{
  if (claims == NULL)
    return;
  g_hash_table_unref (claims->owners);
  g_hash_table_unref (claims->below);
  g_free (claims);
}

/* Every path that path is inside: its prefixes that a '/' follows (the empty one too, when
 * path is absolute), and "/" for an absolute path other than "/" itself. */
static GPtrArray *
around (const char *path)
{
  GPtrArray *out = g_ptr_array_new_with_free_func (g_free);

  for (const char *slash = strchr (path, '/'); slash != NULL; slash = strchr (slash + 1, '/'))
    g_ptr_array_add (out, g_strndup (path, (gsize) (slash - path)));
  if (path[0] == '/' && path[1] != '/' && path[1] != '\0')
    g_ptr_array_add (out, g_strdup ("/"));
  return out;
}

void
shimwatch_cgroup_claims_set (ShimwatchCgroupClaims *claims,
                             const char            *path,
                             const char            *owner)
{
  g_autoptr(GPtrArray) parents = NULL;

  g_return_if_fail (claims != NULL && path != NULL && owner != NULL);

  if (!g_hash_table_contains (claims->owners, path))
    {
      parents = around (path);
      for (guint i = 0; i < parents->len; i++)
        {
          const char *parent = g_ptr_array_index (parents, i);
          GHashTable *inside = g_hash_table_lookup (claims->below, parent);

          if (inside == NULL)
            {
              inside = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
              g_hash_table_insert (claims->below, g_strdup (parent), inside);
            }
          g_hash_table_add (inside, g_strdup (path));
        }
    }
  g_hash_table_insert (claims->owners, g_strdup (path), g_strdup (owner));
}

void
shimwatch_cgroup_claims_release (ShimwatchCgroupClaims *claims,
                                 const char            *path,
                                 const char            *owner)
{
  g_autoptr(GPtrArray) parents = NULL;

  g_return_if_fail (claims != NULL && owner != NULL);

  if (path == NULL || g_strcmp0 (g_hash_table_lookup (claims->owners, path), owner) != 0)
    return;
  parents = around (path);
  for (guint i = 0; i < parents->len; i++)
    {
      const char *parent = g_ptr_array_index (parents, i);
      GHashTable *inside = g_hash_table_lookup (claims->below, parent);

      if (inside != NULL && g_hash_table_remove (inside, path) &&
          g_hash_table_size (inside) == 0)
        g_hash_table_remove (claims->below, parent);
    }
  g_hash_table_remove (claims->owners, path);
}

const char *
shimwatch_cgroup_claims_overlap (ShimwatchCgroupClaims *claims,
                                 const char            *path)
{
  g_autoptr(GPtrArray) parents = NULL;
  GHashTable *inside;
  const char *owner;

  g_return_val_if_fail (claims != NULL && path != NULL, NULL);

  if ((owner = g_hash_table_lookup (claims->owners, path)) != NULL)
    return owner;
  parents = around (path);
  for (guint i = 0; i < parents->len; i++)
    if ((owner = g_hash_table_lookup (claims->owners, g_ptr_array_index (parents, i))) != NULL)
      return owner;
  inside = g_hash_table_lookup (claims->below, path);
  if (inside != NULL)
    {
      GHashTableIter iter;
      gpointer claimed;

      g_hash_table_iter_init (&iter, inside);
      if (g_hash_table_iter_next (&iter, &claimed, NULL))
        return g_hash_table_lookup (claims->owners, claimed);
    }
  return NULL;
}

guint
shimwatch_cgroup_claims_size (ShimwatchCgroupClaims *claims)
{
  g_return_val_if_fail (claims != NULL, 0);
  return g_hash_table_size (claims->owners);
}
