/*
 * options.h -- the Graphcore plugin's typed options: names, types and
 * ranges checked by nxhal_options_check against options.c's spec tables,
 * the rest of each value checked there too.
 */
#ifndef NX_HAL_GRAPHCORE_OPTIONS_H_
#define NX_HAL_GRAPHCORE_OPTIONS_H_

#include "backend.h"
#include "nx_hal/nx_hal_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks client_create options and fills *out (defaults for absent ones:
 * 1 IPU, float32, SDK memory proportion, float32 partials, attached device,
 * hardware). INVALID_ARGUMENT naming the option on a bad name, type or value.
 * Caller owns the status. Thread-safe. */
nxhal_status_t* nxhal_graphcore_parse_client_options(const nxhal_option_t* options,
                                                     size_t num_options,
                                                     nxhal_graphcore_config_t* out);

/* Checks executable_compile options (precision, available_memory_proportion,
 * half_partials) and fills *out starting from the client's settings.
 * Caller owns the status. Thread-safe. */
nxhal_status_t* nxhal_graphcore_parse_compile_options(const nxhal_option_t* options,
                                                      size_t num_options,
                                                      const nxhal_graphcore_config_t* client,
                                                      nxhal_graphcore_compile_config_t* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NX_HAL_GRAPHCORE_OPTIONS_H_ */
