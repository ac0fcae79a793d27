/* fake_libpoplar.c -- a library named libpoplar.so for one test only: a
 * backend links it, then the loader cannot find it, which is the real
 * "Poplar SDK not loadable" failure with the real dlerror text. */
int gc_fake_poplar_marker(void);
int gc_fake_poplar_marker(void) {
  return 42;
}
