/*
 * openvino.h -- OpenVINO's C library, loaded at run time.
 *
 * The plugin does not link libopenvino_c: its file name carries the release
 * (libopenvino_c.so.2641 for 2026.4.1), so a linked plugin loads beside one
 * openvino release only. It is opened with dlopen once per process and the
 * functions below are resolved into `npu_ov`, each pointer typed from the
 * declaration in OpenVINO's own headers (openvino/c/openvino.h). Calling an
 * ov_* function directly would fail the link (-Wl,--no-undefined).
 */
#ifndef NX_HAL_NPU_OPENVINO_H_
#define NX_HAL_NPU_OPENVINO_H_

#include "nx_hal/nx_hal.h"
#include "openvino/c/openvino.h"

/* The openvino releases this plugin runs with: the same range as the
 * `openvino` requirement in pyproject.toml (a test keeps the two equal).
 * 2025.1 renumbered ov_element_type_e (UNDEFINED dropped, DYNAMIC = 0), so
 * an older library would read every element type one off. */
#define NPU_OV_MIN_MAJOR 2025
#define NPU_OV_MIN_MINOR 1
#define NPU_OV_BELOW_MAJOR 2027
#define NPU_OV_REQUIREMENT "openvino>=2025.1,<2027"

/* The environment variable naming libopenvino_c explicitly. */
#define NPU_OV_LIBRARY_ENV "NXHAL_NPU_OPENVINO_LIBRARY"

/* Every OpenVINO function the plugin calls. Each one exists in every release
 * of the range above: the non-variadic *_props functions (2026.4) do not. */
#define NPU_OV_FUNCTIONS(X)                      \
  X(ov_available_devices_free)                   \
  X(ov_compiled_model_create_infer_request)      \
  X(ov_compiled_model_export_model)              \
  X(ov_compiled_model_free)                      \
  X(ov_compiled_model_get_property)              \
  X(ov_compiled_model_input_by_index)            \
  X(ov_compiled_model_inputs_size)               \
  X(ov_compiled_model_output_by_index)           \
  X(ov_compiled_model_outputs_size)              \
  X(ov_core_compile_model)                       \
  X(ov_core_create)                              \
  X(ov_core_free)                                \
  X(ov_core_get_available_devices)               \
  X(ov_core_get_property)                        \
  X(ov_core_get_versions_by_device_name)         \
  X(ov_core_import_model)                        \
  X(ov_core_read_model_from_memory_buffer)       \
  X(ov_core_set_property)                        \
  X(ov_core_versions_free)                       \
  X(ov_dimension_is_dynamic)                     \
  X(ov_free)                                     \
  X(ov_get_error_info)                           \
  X(ov_get_last_err_msg)                         \
  X(ov_get_openvino_version)                     \
  X(ov_infer_request_free)                       \
  X(ov_infer_request_get_output_tensor_by_index) \
  X(ov_infer_request_infer)                      \
  X(ov_infer_request_set_callback)               \
  X(ov_infer_request_set_input_tensor_by_index)  \
  X(ov_infer_request_set_output_tensor_by_index) \
  X(ov_infer_request_start_async)                \
  X(ov_infer_request_wait)                       \
  X(ov_model_free)                               \
  X(ov_output_const_port_free)                   \
  X(ov_partial_shape_free)                       \
  X(ov_port_get_any_name)                        \
  X(ov_port_get_element_type)                    \
  X(ov_port_get_partial_shape)                   \
  X(ov_rank_is_dynamic)                          \
  X(ov_shape_create)                             \
  X(ov_shape_free)                               \
  X(ov_tensor_create_from_host_ptr)              \
  X(ov_tensor_data)                              \
  X(ov_tensor_free)                              \
  X(ov_tensor_get_byte_size)                     \
  X(ov_tensor_get_shape)                         \
  X(ov_tensor_get_size)                          \
  X(ov_version_free)

/* The property-name variables the plugin reads (`const char*` in the library). */
#define NPU_OV_VARIABLES(X)                   \
  X(ov_property_key_cache_dir)                \
  X(ov_property_key_device_full_name)         \
  X(ov_property_key_hint_inference_precision) \
  X(ov_property_key_hint_enable_cpu_pinning)  \
  X(ov_property_key_hint_performance_mode)    \
  X(ov_property_key_inference_num_threads)    \
  X(ov_property_key_num_streams)              \
  X(ov_property_key_optimal_number_of_infer_requests)

/* The resolved library: function pointers, and the variables' values. */
typedef struct npu_ov_api {
#define NPU_OV_FUNCTION_MEMBER(name) __typeof__(name)* name;
  NPU_OV_FUNCTIONS(NPU_OV_FUNCTION_MEMBER)
#undef NPU_OV_FUNCTION_MEMBER
#define NPU_OV_VARIABLE_MEMBER(name) __typeof__(name) name;
  NPU_OV_VARIABLES(NPU_OV_VARIABLE_MEMBER)
#undef NPU_OV_VARIABLE_MEMBER
} npu_ov_api_t;

/* Filled by the first npu_ov_load; read-only afterwards, and only valid once
 * a npu_ov_load has returned NULL (every client handle implies that). */
extern npu_ov_api_t npu_ov;

/* Loads OpenVINO's C library once per process, searching in order: the file
 * named by $NXHAL_NPU_OPENVINO_LIBRARY (alone, when set); the openvino wheel
 * beside this plugin (<plugin dir>/../openvino/libs/libopenvino_c.so*,
 * highest version first); the system loader's libopenvino_c.so.
 * NULL when `npu_ov` is usable; otherwise an UNAVAILABLE status saying what
 * was searched, why each failed and how to fix it, the same every call.
 * Caller owns the status. Thread-safe; never aborts. */
nxhal_status_t* npu_ov_load(void);

/* The path that was loaded, or NULL when nothing was. Static storage. Thread-safe. */
const char* npu_ov_library_path(void);

#endif /* NX_HAL_NPU_OPENVINO_H_ */
