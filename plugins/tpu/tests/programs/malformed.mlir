// Not valid MLIR: the add has no operand types and the brace never closes.
module @broken {
  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %x, %x
