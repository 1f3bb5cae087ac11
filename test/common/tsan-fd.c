/* TSan builds only (test/meson.build adds it to every test and the bench
 * when b_sanitize has `thread`). A libuv built without TSan (Debian's)
 * closes its descriptors with syscall(SYS_close), which TSan does not
 * intercept: it never sees the close, and when another thread's loop gets
 * the same number from epoll_create1, eventfd or pipe2, it reports a race
 * between that thread and the one that used the old descriptor, between
 * two of libuv's own calls. This `syscall`, which the executable exports
 * ahead of libc's, sends SYS_close through close() (which TSan sees) and
 * everything else on to libc. Never in the library. */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

long syscall(long nr, ...);

typedef long (*syscall_fn)(long, ...);

long syscall(long nr, ...) {
  static _Atomic(void *) found; /* any thread may look it up first */
  void *p;
  long a[6];
  va_list ap;
  int i;

  /* As libc's own: six words, whatever the call takes. */
  va_start(ap, nr);
  for (i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  if (nr == SYS_close) return close((int)a[0]);
  if ((p = atomic_load(&found)) == NULL) {
    p = dlsym(RTLD_NEXT, "syscall");
    atomic_store(&found, p);
  }
  return (*(syscall_fn *)&p)(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
