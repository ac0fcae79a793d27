/* backend_discovery.c -- finding installed PJRT backends from C, the way
 * nx_hal_tpu/backends.py does from Python: pip installs this library as
 * <site-packages>/nx_hal_tpu/libnxhal_tpu.so and the backend wheels (libtpu,
 * jax-cuda12/13-pjrt, xla-cpu-pjrt) into the same site-packages, so a C
 * program that loads the plugin needs no option or variable to find them. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

/* Where each backend wheel puts its library under site-packages, in the
 * order backends.py tries them; the first existing file of a label wins.
 * Labels state the family ("gpu:cuda12"), as backends.py's do. */
typedef struct tpu_known_backend {
  const char* label;
  const char* files[2]; /* relative to site-packages; NULL ends */
} tpu_known_backend_t;

static const tpu_known_backend_t tpu_known_backends[] = {
    {"tpu", {"libtpu/libtpu.so", NULL}},
    {"gpu:cuda12",
     {"jax_plugins/xla_cuda12/xla_cuda_plugin.so",
      "jax_plugins/xla_cuda12/pjrt_c_api_gpu_plugin.so"}},
    {"gpu:cuda13",
     {"jax_plugins/xla_cuda13/xla_cuda_plugin.so",
      "jax_plugins/xla_cuda13/pjrt_c_api_gpu_plugin.so"}},
    {"cpu", {"xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so", NULL}},
};

/* What dladdr resolves: an object inside this plugin library. */
static const char tpu_discovery_anchor = 0;

/* The directory two levels above this library (site-packages when it is
 * installed as <site-packages>/nx_hal_tpu/libnxhal_tpu.so); malloc'd or NULL. */
static char* tpu_site_packages(void) {
  Dl_info info;
  char* real;
  int up;
  if (dladdr(&tpu_discovery_anchor, &info) == 0 || info.dli_fname == NULL) return NULL;
  real = realpath(info.dli_fname, NULL);
  if (real == NULL) return NULL;
  for (up = 0; up < 2; ++up) {
    char* slash = strrchr(real, '/');
    if (slash == NULL || slash == real) {
      free(real);
      return NULL;
    }
    *slash = '\0';
  }
  return real;
}

static int tpu_is_file(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

void tpu_backends_discover(tpu_candidate_t** items, size_t* count, char** out_searched) {
  char* site = tpu_site_packages();
  size_t k;
  *out_searched = NULL;
  if (site == NULL) return;
  *out_searched = tpu_sprintf(
      "%s/libtpu/libtpu.so, %s/jax_plugins/xla_cuda{12,13}/"
      "{xla_cuda_plugin.so,pjrt_c_api_gpu_plugin.so}, "
      "%s/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so",
      site, site, site);
  for (k = 0; k < sizeof(tpu_known_backends) / sizeof(tpu_known_backends[0]); ++k) {
    const tpu_known_backend_t* known = &tpu_known_backends[k];
    size_t f;
    for (f = 0; f < 2 && known->files[f] != NULL; ++f) {
      char* path = tpu_sprintf("%s/%s", site, known->files[f]);
      if (path != NULL && tpu_is_file(path)) {
        tpu_candidates_add(items, count, known->label, path);
        free(path);
        break;
      }
      free(path);
    }
  }
  free(site);
}
