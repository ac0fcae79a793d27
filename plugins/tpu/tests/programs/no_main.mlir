// Valid StableHLO, but the entry function is not called main.
module @nomain {
  func.func public @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %x, %x : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
