/* SPDX-License-Identifier: Apache-2.0
 *
 * For tests that prove a code path makes no call of some system calls: a seccomp filter,
 * for the calling thread and the threads it starts from then on, that answers them with
 * an error (SECCOMP_RET_ERRNO) or with SIGSYS (SECCOMP_RET_TRAP: count them in a handler).
 * Install it in a g_test_trap_subprocess() child: it cannot be taken back.
 */
#pragma once

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
