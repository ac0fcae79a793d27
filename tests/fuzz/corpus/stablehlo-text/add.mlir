func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %z = stablehlo.add %x, %y : tensor<4xf32>
  return %z : tensor<4xf32>
}
