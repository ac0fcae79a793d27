func.func @main(%x: tensor<3x5xf32>) -> tensor<3xf32> {
  %init = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %s = stablehlo.reduce(%x init: %init) applies stablehlo.add across dimensions = [1] : (tensor<3x5xf32>, tensor<f32>) -> tensor<3xf32>
  return %s : tensor<3xf32>
}
