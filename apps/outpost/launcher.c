/* The `outpost` command users run: blocks the stop signals, then executes the real program,
 * outpost-main, found next to this file (build tree) or in the libexec directory (installed).
 *
 * Why a separate program: the real CLI links about fifty shared libraries (every client library),
 * and the dynamic loader takes 10-20 ms to map and relocate them before main() can block SIGTERM.
 * A SIGTERM in that window (a supervisor stopping a service it just started, a test runner) killed
 * the relay with exit 143 instead of letting it drain and exit 0. This file
 * is linked statically and does nothing else, so the window shrinks to the exec itself; a blocked
 * signal stays blocked across execve() and stays pending, and outpost-main takes it on its
 * sigwait() thread as if it had arrived a moment later (apps/outpost/main.cpp, signals.cpp).
 * The process id does not change (sd_notify, PID files and kill by PID keep working). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef OUTPOST_LIBEXEC_FROM_BIN
#define OUTPOST_LIBEXEC_FROM_BIN "../libexec/outpost"
#endif

#if defined(__x86_64__) && defined(__linux__)
/* The process's very first instructions (the ELF entry point, set with -e in CMakeLists.txt):
 * block SIGINT and SIGTERM with one raw rt_sigprocmask system call, then go on to the C
 * library's own _start. Even a static C library runs for a fraction of a millisecond before
 * main() (TLS, IRELATIVE relocations, tunables); a signal sent right after the parent saw the
 * exec succeed lands in that window. %rdx holds the loader's exit function at entry and is
 * the syscall's third argument, so it is kept in %r12 (its value at entry is not used). */
__attribute__((used)) static const unsigned long outpost_entry_stop_set =
    (1UL << (SIGINT - 1)) | (1UL << (SIGTERM - 1));
__asm__(
    ".text\n"
    ".globl outpost_entry\n"
    ".type outpost_entry, @function\n"
    "outpost_entry:\n"
    "  mov %rdx, %r12\n"
    "  mov $14, %eax\n"  /* SYS_rt_sigprocmask */
    "  xor %edi, %edi\n" /* SIG_BLOCK */
    "  lea outpost_entry_stop_set(%rip), %rsi\n"
    "  xor %edx, %edx\n" /* no old set */
    "  mov $8, %r10d\n"  /* sizeof(kernel sigset_t) */
    "  syscall\n"
    "  mov %r12, %rdx\n"
    "  jmp _start\n");
#endif

static int join(char* out, size_t size, const char* dir, const char* rest) {
  int n = snprintf(out, size, "%s/%s", dir, rest);
  return n > 0 && (size_t)n < size;
}

int main(int argc, char** argv) {
  (void)argc;
  /* The same set main.cpp blocks (block_stop_signals); again here for builds without the entry
   * point above. */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop, NULL);

  char dir[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
  if (n <= 0) {
    fprintf(stderr, "outpost: cannot find its own path (/proc/self/exe): %s\n", strerror(errno));
    return 127;
  }
  dir[n] = '\0';
  char* slash = strrchr(dir, '/');
  if (slash) *slash = '\0';

  char path[PATH_MAX];
  const char* candidates[] = {"outpost-main", OUTPOST_LIBEXEC_FROM_BIN "/outpost-main"};
  for (size_t i = 0; i < sizeof candidates / sizeof *candidates; ++i) {
    if (!join(path, sizeof path, dir, candidates[i]) || access(path, X_OK) != 0) continue;
    execv(path, argv);
    fprintf(stderr, "outpost: cannot run %s: %s\n", path, strerror(errno));
    return 127;
  }
  fprintf(stderr, "outpost: outpost-main is neither in %s nor in %s/%s\n", dir, dir,
          OUTPOST_LIBEXEC_FROM_BIN);
  return 127;
}
