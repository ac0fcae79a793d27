func.func @main(%x: tensor<2x6xi32>) -> tensor<3x4xf16> {
  %r = stablehlo.reshape %x : (tensor<2x6xi32>) -> tensor<3x4xi32>
  %t = stablehlo.transpose %r, dims = [0, 1] : (tensor<3x4xi32>) -> tensor<3x4xi32>
  %c = stablehlo.convert %t : (tensor<3x4xi32>) -> tensor<3x4xf16>
  %b = stablehlo.broadcast_in_dim %c, dims = [0, 1] : (tensor<3x4xf16>) -> tensor<3x4xf16>
  return %b : tensor<3x4xf16>
}
