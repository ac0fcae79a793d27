/*
 * find_plugin.c -- finds a plugin the way C programs do (through the
 * manifests its wheel installed), loads it and prints what it reports.
 *
 *   cc find_plugin.c $(nx-hal sdk --cflags --libs) -o find_plugin
 *   ./find_plugin template
 *
 * Exit status 0 when the plugin was found, negotiated and made a client.
 */
#include <stdio.h>

#include "nx_hal/nx_hal.h"
#include "nx_hal/nx_hal_loader.h"

/* Prints and frees a plugin status (owned by the caller); 1 if it was an error. */
static int report(const nxhal_api_t* api, nxhal_status_t* status, const char* what) {
  if (status == NULL) return 0;
  fprintf(stderr, "%s: %s: %s\n", what, nxhal_status_code_name(api->status_code(status)),
          api->status_message(status));
  api->status_free(status);
  return 1;
}

int main(int argc, char** argv) {
  const char* name = argc > 1 ? argv[1] : "template";
  nxhal_plugin_t* plugin = NULL;
  nxhal_client_t* client = NULL;
  nxhal_device_t* device = NULL;
  const nxhal_api_t* api;
  nxhal_plugin_info_t info = {.struct_size = sizeof(info)};
  nxhal_device_info_t device_info = {.struct_size = sizeof(device_info)};
  nxhal_status_t* status = nxhal_plugin_open_by_name(name, &plugin);
  int failed;
  if (status != NULL) {
    /* Loader statuses are freed by the loader. */
    fprintf(stderr, "open '%s': %s\n", name, nxhal_loader_status_message(status));
    nxhal_loader_status_free(status);
    return 1;
  }
  api = nxhal_plugin_api(plugin);
  failed = report(api, api->plugin_info(&info), "plugin_info") ||
           report(api, api->client_create(NULL, 0, &client), "client_create") ||
           report(api, api->client_device(client, 0, &device), "client_device") ||
           report(api, api->device_info(device, &device_info), "device_info");
  if (!failed) {
    printf("%s: %s %s from %s (ABI %u.%u), device 0: %s, format %s\n", name, info.vendor,
           info.plugin_version, nxhal_plugin_path(plugin), nxhal_plugin_abi_major(plugin),
           nxhal_plugin_abi_minor(plugin), device_info.name,
           device_info.num_formats > 0 ? device_info.formats[0] : "(none)");
  }
  if (client != NULL) api->client_destroy(client);
  nxhal_plugin_close(plugin);
  return failed;
}
