/* SPDX-License-Identifier: Apache-2.0
 *
 * For tests that prove a code path makes no call of some system calls: a seccomp filter,
 * for the calling thread and the threads it starts from then on, that answers them with
 * an error (SECCOMP_RET_ERRNO) or with SIGSYS (SECCOMP_RET_TRAP: count them in a handler).
 * Install it in a g_test_trap_subprocess() child: it cannot be taken back
 * (shimwatch_test_trap_under_filter() does both).
 */
#pragma once

#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <glib.h>

#if defined(__x86_64__)
# define SHIMWATCH_TEST_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
# define SHIMWATCH_TEST_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/* FALSE where no filter can be made (another architecture): the caller skips */
static inline gboolean
shimwatch_test_filter_syscalls (const long *numbers,
                                guint       n_numbers,
                                guint32     action)
{
#ifdef SHIMWATCH_TEST_AUDIT_ARCH
  struct sock_filter filter[4 + 2 * 16 + 1];
  struct sock_fprog program = { .filter = filter };
  guint n = 0;

  g_assert_cmpuint (n_numbers, <=, 16);
  /* another architecture's calls (a 32-bit ABI) are not ours to judge */
  filter[n++] = (struct sock_filter) BPF_STMT (BPF_LD | BPF_W | BPF_ABS,
                                               offsetof (struct seccomp_data, arch));
  filter[n++] = (struct sock_filter) BPF_JUMP (BPF_JMP | BPF_JEQ | BPF_K,
                                               SHIMWATCH_TEST_AUDIT_ARCH, 1, 0);
  filter[n++] = (struct sock_filter) BPF_STMT (BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  filter[n++] = (struct sock_filter) BPF_STMT (BPF_LD | BPF_W | BPF_ABS,
                                               offsetof (struct seccomp_data, nr));
  for (guint i = 0; i < n_numbers; i++)
    {
      filter[n++] = (struct sock_filter) BPF_JUMP (BPF_JMP | BPF_JEQ | BPF_K,
                                                   (guint32) numbers[i], 0, 1);
      filter[n++] = (struct sock_filter) BPF_STMT (BPF_RET | BPF_K, action);
    }
  filter[n++] = (struct sock_filter) BPF_STMT (BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  program.len = (unsigned short) n;
  g_assert_no_errno (prctl (PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
  g_assert_no_errno (prctl (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program));
  return TRUE;
#else
  return FALSE;
#endif
}

/* A test that counts system calls in a handler of SIGSYS runs in a child of its own. In
 * the test's process: runs the test again in a g_test_trap_subprocess() child, asserts
 * that it passed and returns FALSE (the caller returns). In that child: installs @handler
 * for SIGSYS, then a filter answering @calls with SECCOMP_RET_TRAP, and returns TRUE (the
 * caller goes on with the test). Call it before whatever is measured starts its threads:
 * only threads made later inherit the filter. The child's tear-down must not exec (rm(1)
 * would die of the filter: a handler does not survive exec). */
static inline gboolean
shimwatch_test_trap_under_filter (const long *calls,
                                  guint       n_calls,
                                  void      (*handler) (int        sig,
                                                        siginfo_t *info,
                                                        void      *context))
{
  struct sigaction action = { .sa_sigaction = handler, .sa_flags = SA_SIGINFO };

  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDERR);
      g_test_trap_assert_passed ();
      return FALSE;
    }
  g_assert_no_errno (sigaction (SIGSYS, &action, NULL));
  g_assert_true (shimwatch_test_filter_syscalls (calls, n_calls, SECCOMP_RET_TRAP));
  return TRUE;
}
