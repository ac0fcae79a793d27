// Two replicas: output 0 is the sum of every replica's x (all_reduce),
// output 1 is x plus the replica's own id.
module @replicated_sum attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func public @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    %sum = "stablehlo.all_reduce"(%x) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>
    %id = stablehlo.replica_id : tensor<ui32>
    %idf = stablehlo.convert %id : (tensor<ui32>) -> tensor<f32>
    %idb = stablehlo.broadcast_in_dim %idf, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %own = stablehlo.add %x, %idb : tensor<4xf32>
    return %sum, %own : tensor<4xf32>, tensor<4xf32>
  }
}
