func.func @main(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>) -> tensor<2x3xf32> {
  %h = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %c = stablehlo.constant dense<0.000000e+00> : tensor<2x3xf32>
  %z = stablehlo.maximum %h, %c : tensor<2x3xf32>
  return %z : tensor<2x3xf32>
}
