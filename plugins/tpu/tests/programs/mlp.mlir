// Two-layer MLP: y = relu(x @ w1 + b1) @ w2 + b2, biases broadcast over the batch.
// x: f32[2,3], w1: f32[3,5], b1: f32[5], w2: f32[5,2], b2: f32[2]. Two outputs:
// the logits and the hidden activations.
module @mlp {
  func.func public @main(%x: tensor<2x3xf32>, %w1: tensor<3x5xf32>, %b1: tensor<5xf32>,
                         %w2: tensor<5x2xf32>, %b2: tensor<2xf32>) -> (tensor<2x2xf32>, tensor<2x5xf32>) {
    %h0 = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
    %bb1 = stablehlo.broadcast_in_dim %b1, dims = [1] : (tensor<5xf32>) -> tensor<2x5xf32>
    %h1 = stablehlo.add %h0, %bb1 : tensor<2x5xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<2x5xf32>
    %h = stablehlo.maximum %h1, %zero : tensor<2x5xf32>
    %y0 = stablehlo.dot_general %h, %w2, contracting_dims = [1] x [0] : (tensor<2x5xf32>, tensor<5x2xf32>) -> tensor<2x2xf32>
    %bb2 = stablehlo.broadcast_in_dim %b2, dims = [1] : (tensor<2xf32>) -> tensor<2x2xf32>
    %y = stablehlo.add %y0, %bb2 : tensor<2x2xf32>
    return %y, %h : tensor<2x2xf32>, tensor<2x5xf32>
  }
}
