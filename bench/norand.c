/* Preloaded under callgrind by bench/count: Ruby seeds its hash function
 * from getrandom, which moves instruction counts by about 2% from one run
 * to the next. Constant bytes make the counts repeatable. Measurement only. */
#include <string.h>
#include <sys/types.h>

ssize_t getrandom(void *buf, size_t len, unsigned int flags) {
  (void)flags;
  memset(buf, 7, len);
  return (ssize_t)len;
}

int getentropy(void *buf, size_t len) {
  memset(buf, 7, len);
  return 0;
}
