//! Pooling and normalization.

op! {
    /// `max_pool2d/3d_with_indices` over the trailing `kernel.len()` dims: inputs `[x]`,
    /// outputs `[values, indices]` (flat index within each channel's spatial grid).
    pub struct MaxPool = "max_pool" {
        pub kernel: Vec<i64> ["kernel"],
        pub stride: Vec<i64> ["stride"],
        pub padding: Vec<i64> ["padding"],
        pub dilation: Vec<i64> ["dilation"],
        pub ceil_mode: bool ["ceil_mode"],
    }
}

op! {
    /// `avg_pool2d`/`avg_pool3d` over the trailing `kernel.len()` dims: inputs `[x]`.
    pub struct AvgPool = "avg_pool" {
        pub kernel: Vec<i64> ["kernel"],
        pub stride: Vec<i64> ["stride"],
        pub padding: Vec<i64> ["padding"],
        pub ceil_mode: bool ["ceil_mode"],
        pub count_include_pad: bool ["count_include_pad"],
        pub divisor_override: Option<i64> ["divisor"],
    }
}

op! {
    /// `_adaptive_avg_pool2d`/`3d` over the trailing `spatial` dims, to the recorded output
    /// size: inputs `[x]`.
    pub struct AdaptiveAvgPool = "adaptive_avg_pool" {
        pub spatial: usize ["spatial"],
    }
}

op! {
    /// `native_group_norm`: inputs `[x, (weight), (bias)]`, outputs `[y, mean, rstd]`.
    pub struct GroupNorm = "group_norm" {
        pub groups: i64 ["groups"],
        pub eps: f64 ["eps"],
        pub has_weight: bool ["weight"],
        pub has_bias: bool ["bias"],
    }
}

op! {
    /// `_native_batch_norm_legit` in training mode (batch statistics): inputs
    /// `[x, (weight), (bias)]` plus the running stats when present, outputs `[y, mean, rstd]`.
    /// `_native_batch_norm_legit_functional` also returns the updated running stats (outputs
    /// `[y, mean, rstd, running_mean, running_var]`), blending in `momentum`.
    pub struct BatchNormTraining = "batch_norm_training" {
        pub eps: f64 ["eps"],
        pub has_weight: bool ["weight"],
        pub has_bias: bool ["bias"],
        pub running_stats: bool ["running_stats"],
        pub momentum: Option<f64> ["momentum"],
    }
}

op! {
    /// `_native_batch_norm_legit_no_training`: inputs `[x, (weight), (bias), mean, var]`,
    /// outputs `[y, save_mean, save_invstd]`.
    pub struct BatchNormInference = "batch_norm_inference" {
        pub eps: f64 ["eps"],
        pub has_weight: bool ["weight"],
        pub has_bias: bool ["bias"],
    }
}

op! {
    /// `native_layer_norm` over the last `normalized_rank` dims: inputs `[x, (weight), (bias)]`,
    /// outputs `[y, mean, rstd]`.
    pub struct LayerNorm = "layer_norm" {
        pub normalized_rank: usize ["normalized_rank"],
        pub eps: f64 ["eps"],
        pub has_weight: bool ["weight"],
        pub has_bias: bool ["bias"],
    }
}
