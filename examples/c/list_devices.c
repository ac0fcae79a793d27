/*
 * list_devices.c -- lists nx_hal plugins and their devices through the loader.
 *
 *   list_devices [PLUGIN ...]
 *
 * With arguments it opens each plugin given: a path (containing '/' or
 * ending in ".so") as is, a bare NAME as libnxhal_NAME.so from
 * NX_HAL_PLUGIN_PATH. Without, every libnxhal_<name>.so there. A plugin that fails to load or
 * has no usable device is reported and skipped: the exit status is 0 unless
 * the command line is wrong.
 */
#include <stdio.h>
#include <string.h>

#include "nx_hal/nx_hal_loader.h"

/* "cpu", "gpu", ...; static string. */
static const char* kind_name(nxhal_device_kind_t kind) {
  switch (kind) {
    case NXHAL_DEVICE_CPU: return "cpu";
    case NXHAL_DEVICE_GPU: return "gpu";
    case NXHAL_DEVICE_TPU: return "tpu";
    case NXHAL_DEVICE_NPU: return "npu";
    case NXHAL_DEVICE_IPU: return "ipu";
    case NXHAL_DEVICE_OTHER: return "other";
  }
  return "unknown";
}

/* `s`, or "(null)" when a plugin left a string unset. */
static const char* text(const char* s) {
  return s != NULL ? s : "(null)";
}

/* Prints a plugin status "CODE: message" and frees it with the plugin's table. */
static void print_plugin_status(const nxhal_api_t* api, const char* what, nxhal_status_t* status) {
  printf("  %s: %s: %s\n", what, nxhal_status_code_name(api->status_code(status)),
         api->status_message(status));
  api->status_free(status);
}

/* Prints one device; returns 0 after printing a failure. */
static int print_device(const nxhal_api_t* api, nxhal_client_t* client, size_t index) {
  nxhal_device_t* device = NULL;
  nxhal_device_info_t info;
  nxhal_status_t* status;
  size_t i;
  status = api->client_device(client, index, &device);
  if (status == NULL) {
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    status = api->device_info(device, &info);
  }
  if (status != NULL) {
    print_plugin_status(api, "device error", status);
    return 0;
  }
  printf("  device %zu: kind %s, vendor \"%s\", name \"%s\"\n", index, kind_name(info.kind),
         text(info.vendor), text(info.name));
  printf("    memory: %llu bytes, compute units: %lld\n", (unsigned long long)info.memory_bytes,
         (long long)info.compute_units);
  printf("    formats:");
  for (i = 0; info.formats != NULL && i < info.num_formats; ++i)
    printf(" %s", text(info.formats[i]));
  printf("\n");
  return 1;
}

/* Creates a client with default options and lists its devices. */
static void print_devices(const nxhal_api_t* api) {
  nxhal_client_t* client = NULL;
  const char* diagnostics = NULL;
  size_t count = 0, i;
  nxhal_status_t* status;
  /* Flush first: a probe that crashes must not swallow what was printed. */
  fflush(stdout);
  status = api->client_create(NULL, 0, &client);
  if (status != NULL) {
    print_plugin_status(api, "status", status);
    return;
  }
  status = api->client_diagnostics(client, &diagnostics);
  if (status != NULL) {
    print_plugin_status(api, "diagnostics error", status);
  } else {
    printf("  diagnostics: %s\n",
           diagnostics != NULL && diagnostics[0] != '\0' ? diagnostics : "(none)");
  }
  status = api->client_device_count(client, &count);
  if (status != NULL) {
    print_plugin_status(api, "device count error", status);
    count = 0;
  }
  printf("  devices: %zu\n", count);
  for (i = 0; i < count; ++i) print_device(api, client, i);
  api->client_destroy(client);
}

/* True when `arg` names a file rather than a plugin. */
static int is_path(const char* arg) {
  size_t len = strlen(arg);
  return strchr(arg, '/') != NULL || (len >= 3 && strcmp(arg + len - 3, ".so") == 0);
}

/* Opens and describes one plugin: a library path, or a name to search for. */
static void describe_plugin(const char* path_or_name) {
  nxhal_plugin_t* plugin = NULL;
  const nxhal_api_t* api;
  nxhal_plugin_info_t info;
  nxhal_status_t* status;
  printf("plugin: %s\n", path_or_name);
  if (is_path(path_or_name)) {
    status = nxhal_plugin_open(path_or_name, &plugin);
  } else {
    status = nxhal_plugin_open_by_name(path_or_name, &plugin);
    if (status == NULL) printf("  path: %s\n", nxhal_plugin_path(plugin));
  }
  if (status != NULL) {
    printf("  status: %s: %s\n", nxhal_status_code_name(nxhal_loader_status_code(status)),
           nxhal_loader_status_message(status));
    nxhal_loader_status_free(status);
    return;
  }
  api = nxhal_plugin_api(plugin);
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  status = api->plugin_info(&info);
  if (status != NULL) {
    print_plugin_status(api, "info error", status);
  } else {
    printf(
        "  name: %s\n  vendor: %s\n  plugin version: %s\n  sdk version: %s\n", text(info.name),
        text(info.vendor), text(info.plugin_version),
        info.sdk_version != NULL && info.sdk_version[0] != '\0' ? info.sdk_version : "(unknown)");
    printf("  abi: plugin %u.%u, negotiated %u.%u\n", (unsigned)info.abi_major,
           (unsigned)info.abi_minor, (unsigned)nxhal_plugin_abi_major(plugin),
           (unsigned)nxhal_plugin_abi_minor(plugin));
  }
  print_devices(api);
  nxhal_plugin_close(plugin);
}

/* nxhal_plugin_enumerate visitor: describes each plugin found. */
static int visit_plugin(const char* name, const char* path, void* user_data) {
  int* found = (int*)user_data;
  (void)name;
  ++*found;
  describe_plugin(path);
  return 0;
}

int main(int argc, char** argv) {
  int i;
  int found = 0;
  nxhal_status_t* status;
  for (i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') {
      fprintf(stderr, "usage: %s [PATH/libnxhal_NAME.so | NAME ...]\n", argv[0]);
      return strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (argc > 1) {
    for (i = 1; i < argc; ++i) describe_plugin(argv[i]);
    return 0;
  }
  status = nxhal_plugin_enumerate(visit_plugin, &found);
  if (status != NULL) {
    fprintf(stderr, "%s\n", nxhal_loader_status_message(status));
    nxhal_loader_status_free(status);
  }
  if (found == 0) printf("no plugins found in " NXHAL_PLUGIN_PATH_ENV "\n");
  return 0;
}
