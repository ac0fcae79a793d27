// Scalars and integers: r = a * b + 1 over i32[] .
module @scalar {
  func.func public @main(%a: tensor<i32>, %b: tensor<i32>) -> tensor<i32> {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %0 = stablehlo.multiply %a, %b : tensor<i32>
    %1 = stablehlo.add %0, %one : tensor<i32>
    return %1 : tensor<i32>
  }
}
