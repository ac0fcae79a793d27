// Source of matmul_sum.mlirbc, a StableHLO portable artifact (MLIR bytecode,
// target 1.9.0) made with jax 0.10.2: jax.jit(lambda a, b: (a @ b + 1.0, a.sum()))
// lowered for f32[2,3], f32[3,4], then
// jaxlib.mlir.dialects.stablehlo.serialize_portable_artifact(text, "1.9.0").
module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<3x4xf32>) -> (tensor<2x4xf32> {jax.result_info = "result[0]"}, tensor<f32> {jax.result_info = "result[1]"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %1 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x4xf32>
    %2 = stablehlo.add %0, %1 : tensor<2x4xf32>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %3 = stablehlo.reduce(%arg0 init: %cst_0) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<f32>
    return %2, %3 : tensor<2x4xf32>, tensor<f32>
  }
}

