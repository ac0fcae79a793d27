// c = a @ b with a: f32[8,16], b: f32[16,4].
module @matmul {
  func.func public @main(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) -> tensor<8x4xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
