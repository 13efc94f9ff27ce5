// LD_PRELOAD shim for tests: eventfd(2) always fails (as it does out of file descriptors or on a
// kernel without it), for the daemon's HTTP server's start (apps/outpost/http_connections.cpp).
#include <errno.h>
#include <sys/eventfd.h>

int eventfd(unsigned int initval, int flags) {
  (void)initval;
  (void)flags;
  errno = ENOSYS;
  return -1;
}
