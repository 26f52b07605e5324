//! An AutoTVM task's `args` read as one of our ops: tensors, strides,
//! padding and dilation checked, and the workload's name built from them.

use super::{describe, problem, Problem};
use crate::workload::{
    check_range, BatchMatmulShape, Conv2dShape, DenseShape, DepthwiseConv2dShape, Op,
    DEFAULT_DTYPE, DTYPES,
};
use crate::yaml_tree::{Node, Yaml};

/// Reads the `args` list of one workload, recording problems.
pub(super) struct Args<'a, 'p> {
    pub(super) args: &'a [Node],
    pub(super) problems: &'p mut Vec<Problem>,
}

/// The arguments shared by conv2d and depthwise tasks.
pub(super) struct ConvArgs {
    data: Tensor,
    kernel: Tensor,
    stride: [u32; 2],
    padding: [u32; 2],
    dilation: [u32; 2],
}

/// A tensor argument: its dimensions and dtype.
pub(super) struct Tensor {
    dims: Vec<u32>,
    dtype: String,
}

impl Args<'_, '_> {
    pub(super) fn fail(&mut self, index: usize, message: String) {
        self.problems
            .push(problem(format!("args[{index}]"), message));
    }

    /// Checks the argument count; `counts` are the accepted lengths.
    pub(super) fn count(&mut self, counts: &[usize], signature: &str) -> bool {
        if counts.contains(&self.args.len()) {
            return true;
        }
        let accepted: Vec<String> = counts.iter().map(usize::to_string).collect();
        self.problems.push(problem(
            "args",
            format!(
                "expected {} arguments ({signature}), got {}",
                accepted.join(" or "),
                self.args.len()
            ),
        ));
        false
    }

    pub(super) fn count_range(&mut self, min: usize, max: usize, signature: &str) -> bool {
        if (min..=max).contains(&self.args.len()) {
            return true;
        }
        self.problems.push(problem(
            "args",
            format!(
                "expected {min} to {max} arguments ({signature}), got {}",
                self.args.len()
            ),
        ));
        false
    }

    /// `[TENSOR, [dims...], dtype]` with `rank` dimensions described by `layout`.
    pub(super) fn tensor(&mut self, index: usize, what: &str, layout: &str) -> Option<Tensor> {
        let node = self.args.get(index)?;
        let rank = layout.split(',').count();
        let items = match &node.value {
            Yaml::Seq(items) if items.len() == 3 && items[0].as_str() == Some("TENSOR") => items,
            _ => {
                let msg = format!(
                    "the {what} must be a tensor [TENSOR, {layout}, dtype], got {}",
                    describe(node)
                );
                self.fail(index, msg);
                return None;
            }
        };
        let mut ok = true;
        let dims: Vec<i128> = match &items[1].value {
            Yaml::Seq(dims) => dims
                .iter()
                .map(|d| match d.value {
                    Yaml::Int(v) => v,
                    _ => {
                        ok = false;
                        0
                    }
                })
                .collect(),
            _ => {
                ok = false;
                Vec::new()
            }
        };
        if !ok || dims.len() != rank {
            let msg = format!(
                "the {what} must be a {rank}-D tensor {layout}, got shape {}",
                describe(&items[1])
            );
            self.fail(index, msg);
            return None;
        }
        let mut out = Vec::with_capacity(rank);
        for (i, v) in dims.iter().enumerate() {
            match check_range(*v, 1) {
                Ok(v) => out.push(v),
                Err(m) => {
                    self.fail(index, format!("the {what}'s dimension {i} {m}"));
                    ok = false;
                }
            }
        }
        let dtype = match items[2].as_str() {
            Some(d) if DTYPES.contains(&d) => d.to_string(),
            _ => {
                let msg = format!(
                    "the {what}'s dtype {} is not supported (supported: {})",
                    describe(&items[2]),
                    DTYPES.join(", ")
                );
                self.fail(index, msg);
                return None;
            }
        };
        ok.then_some(Tensor { dims: out, dtype })
    }

    /// One integer or a list of integers, each at least `min`.
    pub(super) fn ints(&mut self, index: usize, what: &str, min: u32) -> Option<Vec<u32>> {
        let node = self.args.get(index)?;
        let values: Vec<&Node> = match &node.value {
            Yaml::Int(_) => vec![node],
            Yaml::Seq(items) => items.iter().collect(),
            _ => {
                let msg = format!("{what} must be integers, got {}", describe(node));
                self.fail(index, msg);
                return None;
            }
        };
        let mut out = Vec::with_capacity(values.len());
        for v in values {
            let checked = match v.value {
                Yaml::Int(i) => check_range(i, min),
                _ => Err(format!("must be an integer, got {}", describe(v))),
            };
            match checked {
                Ok(x) => out.push(x),
                Err(m) => {
                    self.fail(index, format!("{what}: {m}"));
                    return None;
                }
            }
        }
        Some(out)
    }

    /// Strides or dilation: one integer or `[h, w]`.
    pub(super) fn pair(&mut self, index: usize, what: &str) -> Option<[u32; 2]> {
        let values = self.ints(index, what, 1)?;
        match values.as_slice() {
            [v] => Some([*v, *v]),
            [h, w] => Some([*h, *w]),
            _ => {
                let msg = format!(
                    "{what} must be one integer or [height, width], got {} values",
                    values.len()
                );
                self.fail(index, msg);
                None
            }
        }
    }

    /// Padding: one integer, `[h, w]` or a symmetric `[top, left, bottom, right]`.
    pub(super) fn padding(&mut self, index: usize) -> Option<[u32; 2]> {
        let values = self.ints(index, "padding", 0)?;
        match values.as_slice() {
            [v] => Some([*v, *v]),
            [h, w] => Some([*h, *w]),
            [top, left, bottom, right] if top == bottom && left == right => Some([*top, *left]),
            [top, left, bottom, right] => {
                let msg = format!(
                    "asymmetric padding [{top}, {left}, {bottom}, {right}] (top, left, bottom, \
                     right) cannot be expressed as a symmetric [height, width] pair: tunefleet \
                     pads both sides of an axis by the same amount"
                );
                self.fail(index, msg);
                None
            }
            _ => {
                let msg = format!(
                    "padding must be one integer, [height, width] or [top, left, bottom, right], \
                     got {} values",
                    values.len()
                );
                self.fail(index, msg);
                None
            }
        }
    }

    /// An optional dtype argument (`out_dtype`): a string or null.
    pub(super) fn opt_dtype(&mut self, index: usize) {
        if let Some(node) = self.args.get(index) {
            if !matches!(node.value, Yaml::Str(_) | Yaml::Null) {
                let msg = format!("out_dtype must be a dtype or null, got {}", describe(node));
                self.fail(index, msg);
            }
        }
    }

    /// An optional boolean argument; `default` when absent or null.
    pub(super) fn opt_bool(&mut self, index: usize, what: &str, default: bool) -> bool {
        match self.args.get(index).map(|n| &n.value) {
            None | Some(Yaml::Null) => default,
            Some(Yaml::Bool(b)) => *b,
            Some(_) => {
                let msg = format!(
                    "{what} must be true or false, got {}",
                    self.args.get(index).map(describe).unwrap_or_default()
                );
                self.fail(index, msg);
                default
            }
        }
    }

    /// Data and weight must share a dtype (our format has one dtype per workload).
    pub(super) fn same_dtype(&mut self, index: usize, data: &Tensor, weight: &Tensor) -> bool {
        if data.dtype == weight.dtype {
            return true;
        }
        let msg = format!(
            "the weight's dtype {} differs from the data's {}: mixed input dtypes are not \
             supported",
            weight.dtype, data.dtype
        );
        self.fail(index, msg);
        false
    }

    /// The shared part of conv2d and depthwise: data, kernel, strides, padding,
    /// dilation, optional layouts, out_dtype.
    pub(super) fn conv_common(&mut self, kernel_layout: &str) -> Option<ConvArgs> {
        if !self.count(
            &[6, 8],
            "data, kernel, strides, padding, dilation, [layout, out_layout,] out_dtype",
        ) {
            return None;
        }
        let data = self.tensor(0, "data", "[N, C, H, W]");
        let kernel = self.tensor(1, "kernel", kernel_layout);
        let stride = self.pair(2, "strides");
        let padding = self.padding(3);
        let dilation = self.pair(4, "dilation");
        let mut layout_ok = true;
        if self.args.len() == 8 {
            if self.args[5].as_str() != Some("NCHW") {
                let msg = format!(
                    "only the data layout \"NCHW\" is supported, got {}",
                    describe(&self.args[5])
                );
                self.fail(5, msg);
                layout_ok = false;
            }
            if self.args[6].as_str().is_none() {
                let msg = format!(
                    "out_layout must be a string, got {}",
                    describe(&self.args[6])
                );
                self.fail(6, msg);
            }
            self.opt_dtype(7);
        } else {
            self.opt_dtype(5);
        }
        let (data, kernel) = (data?, kernel?);
        if !layout_ok || !self.same_dtype(1, &data, &kernel) {
            return None;
        }
        Some(ConvArgs {
            data,
            kernel,
            stride: stride?,
            padding: padding?,
            dilation: dilation?,
        })
    }

    pub(super) fn conv2d(&mut self) -> Option<(Op, String, String)> {
        let ConvArgs {
            data,
            kernel,
            stride,
            padding,
            dilation,
        } = self.conv_common("[O, I, KH, KW]")?;
        let &[n, c, h, w] = data.dims.as_slice() else {
            return None;
        };
        let &[o, i, kh, kw] = kernel.dims.as_slice() else {
            return None;
        };
        if i != c {
            self.fail(
                1,
                format!(
                    "the kernel has {i} input channels but the data has {c}: grouped \
                     convolutions are not supported"
                ),
            );
            return None;
        }
        let name = format!(
            "conv2d_{n}x{c}x{h}x{w}_{o}x{kh}x{kw}_s{}_p{}{}{}",
            pair_text(stride),
            pair_text(padding),
            dilation_suffix(dilation),
            dtype_suffix(&data.dtype)
        );
        let shape = Conv2dShape {
            batch: n,
            in_channels: c,
            height: h,
            width: w,
            out_channels: o,
            kernel: [kh, kw],
            stride,
            padding,
            dilation,
        };
        Some((Op::Conv2dNchw { shape }, data.dtype, name))
    }

    pub(super) fn depthwise(&mut self) -> Option<(Op, String, String)> {
        let ConvArgs {
            data,
            kernel,
            stride,
            padding,
            dilation,
        } = self.conv_common("[C, multiplier, KH, KW]")?;
        let &[n, c, h, w] = data.dims.as_slice() else {
            return None;
        };
        let &[kc, m, kh, kw] = kernel.dims.as_slice() else {
            return None;
        };
        if kc != c {
            self.fail(
                1,
                format!(
                    "the depthwise kernel [C, multiplier, KH, KW] has {kc} channels but the data \
                     has {c}"
                ),
            );
            return None;
        }
        let name = format!(
            "depthwise_conv2d_{n}x{c}x{h}x{w}_m{m}_{kh}x{kw}_s{}_p{}{}{}",
            pair_text(stride),
            pair_text(padding),
            dilation_suffix(dilation),
            dtype_suffix(&data.dtype)
        );
        let shape = DepthwiseConv2dShape {
            batch: n,
            channels: c,
            height: h,
            width: w,
            multiplier: m,
            kernel: [kh, kw],
            stride,
            padding,
            dilation,
        };
        Some((Op::DepthwiseConv2dNchw { shape }, data.dtype, name))
    }

    pub(super) fn dense(&mut self) -> Option<(Op, String, String)> {
        if !self.count_range(2, 4, "data, weight, [bias, [out_dtype]]") {
            return None;
        }
        let data = self.tensor(0, "data", "[M, K]");
        let weight = self.tensor(1, "weight", "[N, K]");
        if let Some(bias) = self.args.get(2) {
            let is_tensor = matches!(&bias.value, Yaml::Seq(items)
                if items.first().and_then(Node::as_str) == Some("TENSOR"));
            if !is_tensor && !matches!(bias.value, Yaml::Null) {
                let msg = format!("the bias must be a tensor or null, got {}", describe(bias));
                self.fail(2, msg);
            }
        }
        self.opt_dtype(3);
        let (data, weight) = (data?, weight?);
        if !self.same_dtype(1, &data, &weight) {
            return None;
        }
        let &[m, k] = data.dims.as_slice() else {
            return None;
        };
        let &[n, wk] = weight.dims.as_slice() else {
            return None;
        };
        if wk != k {
            self.fail(
                1,
                format!("the weight [N, K] has K = {wk} but the data [M, K] has K = {k}"),
            );
            return None;
        }
        let name = format!("dense_{m}x{k}_{n}{}", dtype_suffix(&data.dtype));
        let shape = DenseShape {
            batch: m,
            in_features: k,
            out_features: n,
        };
        Some((Op::Dense { shape }, data.dtype, name))
    }

    pub(super) fn batch_matmul(&mut self) -> Option<(Op, String, String)> {
        if !self.count_range(
            2,
            6,
            "A, B, [out_shape, [out_dtype, [transpose_a, [transpose_b]]]]",
        ) {
            return None;
        }
        let transpose_a = self.opt_bool(4, "transpose_a", false);
        let transpose_b = self.opt_bool(5, "transpose_b", true);
        let a_layout = if transpose_a {
            "[B, K, M]"
        } else {
            "[B, M, K]"
        };
        let b_layout = if transpose_b {
            "[B, N, K]"
        } else {
            "[B, K, N]"
        };
        let a = self.tensor(0, "tensor A", a_layout);
        let b = self.tensor(1, "tensor B", b_layout);
        self.opt_dtype(3);
        let (a, b) = (a?, b?);
        if !self.same_dtype(1, &a, &b) {
            return None;
        }
        let &[ab, a1, a2] = a.dims.as_slice() else {
            return None;
        };
        let &[bb, b1, b2] = b.dims.as_slice() else {
            return None;
        };
        let (m, k) = if transpose_a { (a2, a1) } else { (a1, a2) };
        let (n, bk) = if transpose_b { (b1, b2) } else { (b2, b1) };
        if ab != bb {
            self.fail(
                1,
                format!(
                    "A has batch {ab} but B has batch {bb}: batch broadcasting is not supported"
                ),
            );
            return None;
        }
        if bk != k {
            self.fail(1, format!("B has K = {bk} but A has K = {k}"));
            return None;
        }
        if let Some(node) = self.args.get(2) {
            match &node.value {
                Yaml::Null => {}
                Yaml::Seq(items)
                    if items.len() == 3
                        && items.iter().zip([ab, m, n]).all(
                            |(d, want)| matches!(d.value, Yaml::Int(v) if v == i128::from(want)),
                        ) => {}
                _ => {
                    let msg = format!(
                        "out_shape must be null or [{ab}, {m}, {n}] (batch, M, N), got {}",
                        describe(node)
                    );
                    self.fail(2, msg);
                    return None;
                }
            }
        }
        let name = format!("batch_matmul_{ab}x{m}x{k}_{n}{}", dtype_suffix(&a.dtype));
        let shape = BatchMatmulShape { batch: ab, m, n, k };
        Some((Op::BatchMatmul { shape }, a.dtype, name))
    }
}

/// `1` for `[1, 1]`, `2x1` for `[2, 1]`.
pub(super) fn pair_text([a, b]: [u32; 2]) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}x{b}")
    }
}

pub(super) fn dilation_suffix(dilation: [u32; 2]) -> String {
    if dilation == [1, 1] {
        String::new()
    } else {
        format!("_d{}", pair_text(dilation))
    }
}

pub(super) fn dtype_suffix(dtype: &str) -> String {
    if dtype == DEFAULT_DTYPE {
        String::new()
    } else {
        format!("_{dtype}")
    }
}
