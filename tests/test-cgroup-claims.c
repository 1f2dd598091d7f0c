/* SPDX-License-Identifier: Apache-2.0
 *
 * The index of which task holds which cgroup: the same answers as a scan of every claim
 * with shimwatch_cgroup_paths_overlap(), which it replaced on the CreateTask path.
 */
#include "config.h"

#include "shimwatch-cgroup.h"
#include "shimwatch-cgroup-claims.h"

static void
test_claims_basics (void)
{
  g_autoptr(ShimwatchCgroupClaims) claims = shimwatch_cgroup_claims_new ();

  g_assert_null (shimwatch_cgroup_claims_overlap (claims, "/shimwatch/default/web1"));
  shimwatch_cgroup_claims_set (claims, "/shimwatch/default/web1", "default/web1");
  shimwatch_cgroup_claims_set (claims, "/shimwatch/default/web2", "default/web2");
  g_assert_cmpuint (shimwatch_cgroup_claims_size (claims), ==, 2);

  /* the same cgroup, one inside it, one around it */
  g_assert_cmpstr (shimwatch_cgroup_claims_overlap (claims, "/shimwatch/default/web1"), ==,
                   "default/web1");
  g_assert_cmpstr (shimwatch_cgroup_claims_overlap (claims, "/shimwatch/default/web1/sub"), ==,
                   "default/web1");
  g_assert_nonnull (shimwatch_cgroup_claims_overlap (claims, "/shimwatch/default"));
  g_assert_nonnull (shimwatch_cgroup_claims_overlap (claims, "/shimwatch"));
  g_assert_nonnull (shimwatch_cgroup_claims_overlap (claims, "/"));
  /* a neighbour whose name only starts the same is free */
  g_assert_null (shimwatch_cgroup_claims_overlap (claims, "/shimwatch/default/web10"));
  g_assert_null (shimwatch_cgroup_claims_overlap (claims, "/shimwatch/default/web"));
  g_assert_null (shimwatch_cgroup_claims_overlap (claims, "/shimwatch/other/web1"));

  /* only its owner releases a claim */
  shimwatch_cgroup_claims_release (claims, "/shimwatch/default/web1", "default/web2");
  g_assert_cmpstr (shimwatch_cgroup_claims_overlap (claims, "/shimwatch/default/web1"), ==,
                   "default/web1");
  shimwatch_cgroup_claims_release (claims, "/shimwatch/default/web1", "default/web1");
  g_assert_null (shimwatch_cgroup_claims_overlap (claims, "/shimwatch/default/web1"));
  g_assert_cmpstr (shimwatch_cgroup_claims_overlap (claims, "/shimwatch/default"), ==,
                   "default/web2");
  shimwatch_cgroup_claims_release (claims, "/shimwatch/default/web2", "default/web2");
  g_assert_null (shimwatch_cgroup_claims_overlap (claims, "/"));
  g_assert_cmpuint (shimwatch_cgroup_claims_size (claims), ==, 0);
  shimwatch_cgroup_claims_release (claims, NULL, "nobody");

  /* a second claim of one path replaces its owner, as a record read later does */
  shimwatch_cgroup_claims_set (claims, "/system.slice/shimwatch-a-b.scope", "a/b");
  shimwatch_cgroup_claims_set (claims, "/system.slice/shimwatch-a-b.scope", "a/c");
  g_assert_cmpstr (shimwatch_cgroup_claims_overlap (claims, "/system.slice"), ==, "a/c");
  shimwatch_cgroup_claims_release (claims, "/system.slice/shimwatch-a-b.scope", "a/c");
  g_assert_null (shimwatch_cgroup_claims_overlap (claims, "/system.slice"));
}

static const char *
scan (GHashTable *model,
      const char *path)
{
  GHashTableIter iter;
  gpointer claimed, owner;

  g_hash_table_iter_init (&iter, model);
  while (g_hash_table_iter_next (&iter, &claimed, &owner))
    if (shimwatch_cgroup_paths_overlap (claimed, path))
      return owner;
  return NULL;
}

/* random claims and releases over short paths of '/', 'a' and 'b' (relative, absolute,
 * doubled and trailing slashes, "/" and ""): the index agrees with the scan every time */
static void
test_claims_agree_with_a_scan (void)
{
  g_autoptr(ShimwatchCgroupClaims) claims = shimwatch_cgroup_claims_new ();
  g_autoptr(GHashTable) model = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  g_autoptr(GRand) rand = g_rand_new_with_seed (13);
  static const char alphabet[] = "/ab";

  for (guint step = 0; step < 20000; step++)
    {
      char path[8] = { 0 };
      guint length = (guint) g_rand_int_range (rand, 0, 7);
      g_autofree char *owner = g_strdup_printf ("owner%d", g_rand_int_range (rand, 0, 4));
      const char *expected, *got;

      for (guint i = 0; i < length; i++)
        path[i] = alphabet[g_rand_int_range (rand, 0, 3)];
      switch (g_rand_int_range (rand, 0, 3))
        {
        case 0:
          shimwatch_cgroup_claims_set (claims, path, owner);
          g_hash_table_insert (model, g_strdup (path), g_strdup (owner));
          break;
        case 1:
          shimwatch_cgroup_claims_release (claims, path, owner);
          if (g_strcmp0 (g_hash_table_lookup (model, path), owner) == 0)
            g_hash_table_remove (model, path);
          break;
        default:
          break;
        }
      g_assert_cmpuint (shimwatch_cgroup_claims_size (claims), ==, g_hash_table_size (model));
      expected = scan (model, path);
      got = shimwatch_cgroup_claims_overlap (claims, path);
      if (expected == NULL)
        g_assert_null (got);
      else
        {
          gboolean owns_an_overlapping_claim = FALSE;
          GHashTableIter iter;
          gpointer claimed, claim_owner;

          g_assert_nonnull (got);
          g_hash_table_iter_init (&iter, model);
          while (g_hash_table_iter_next (&iter, &claimed, &claim_owner))
            if (g_str_equal (claim_owner, got) && shimwatch_cgroup_paths_overlap (claimed, path))
              owns_an_overlapping_claim = TRUE;
          g_assert_true (owns_an_overlapping_claim);
        }
    }
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cgroup-claims/basics", test_claims_basics);
  g_test_add_func ("/cgroup-claims/agree-with-a-scan", test_claims_agree_with_a_scan);
  return g_test_run ();
}
