// z = x + y over f32[4].
module @add {
  func.func public @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %x, %y : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
