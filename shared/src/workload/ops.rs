//! The operators of a workload file: which `op` names exist, the keys each
//! one's `shape:` takes, and reading them (every problem reported, with an
//! example of a valid shape).

use super::checks::{
    check_range, check_tvmscript, describe, did_you_mean, geometry_problems, join_field,
    normalise_tvmscript, quote_text,
};
use super::ctx::{read_fields, Ctx, Fields};
use super::{
    BatchMatmulShape, Conv2dShape, DenseShape, DepthwiseConv2dShape, MatmulShape, Op, OPS,
};
use crate::yaml_tree::{Node, Yaml};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum OpKind {
    Matmul,
    BatchMatmul,
    Dense,
    Conv2dNchw,
    Conv2dNhwc,
    DepthwiseConv2dNchw,
}

impl OpKind {
    fn name(self) -> &'static str {
        match self {
            OpKind::Matmul => "matmul",
            OpKind::BatchMatmul => "batch_matmul",
            OpKind::Dense => "dense",
            OpKind::Conv2dNchw => "conv2d_nchw",
            OpKind::Conv2dNhwc => "conv2d_nhwc",
            OpKind::DepthwiseConv2dNchw => "depthwise_conv2d_nchw",
        }
    }

    fn parse(name: &str) -> Option<OpKind> {
        Some(match name {
            "matmul" => OpKind::Matmul,
            "batch_matmul" => OpKind::BatchMatmul,
            "dense" => OpKind::Dense,
            "conv2d_nchw" => OpKind::Conv2dNchw,
            "conv2d_nhwc" => OpKind::Conv2dNhwc,
            "depthwise_conv2d_nchw" => OpKind::DepthwiseConv2dNchw,
            _ => return None,
        })
    }

    fn shape_keys(self) -> &'static [&'static str] {
        match self {
            OpKind::Matmul => &["m", "n", "k"],
            OpKind::BatchMatmul => &["batch", "m", "n", "k"],
            OpKind::Dense => &["batch", "in_features", "out_features"],
            OpKind::Conv2dNchw | OpKind::Conv2dNhwc => &[
                "batch",
                "in_channels",
                "height",
                "width",
                "out_channels",
                "kernel",
                "stride",
                "padding",
                "dilation",
            ],
            OpKind::DepthwiseConv2dNchw => &[
                "batch",
                "channels",
                "height",
                "width",
                "multiplier",
                "kernel",
                "stride",
                "padding",
                "dilation",
            ],
        }
    }

    fn example(self) -> &'static str {
        match self {
            OpKind::Matmul => "{m: 128, n: 128, k: 128}",
            OpKind::BatchMatmul => "{batch: 8, m: 128, n: 128, k: 64}",
            OpKind::Dense => "{batch: 1, in_features: 256, out_features: 128}",
            OpKind::Conv2dNchw | OpKind::Conv2dNhwc => {
                "{batch: 1, in_channels: 64, height: 56, width: 56, out_channels: 64, kernel: 3, \
                 stride: 1, padding: 1}"
            }
            OpKind::DepthwiseConv2dNchw => {
                "{batch: 1, channels: 32, height: 112, width: 112, multiplier: 1, kernel: 3, \
                 stride: 1, padding: 1}"
            }
        }
    }
}

pub(super) fn parse_op(
    ctx: &mut Ctx<'_>,
    fields: &Fields<'_>,
    path: &str,
    item: &Node,
) -> Option<Op> {
    let op_field = join_field(path, "op");
    let op_name = match fields.get("op") {
        None => None,
        Some(node) => match node.as_str() {
            Some(s) => Some((s.trim(), node)),
            None => {
                let msg = format!(
                    "must be the name of an operator (one of: {}), got {}",
                    OPS.join(", "),
                    describe(node)
                );
                ctx.at(node, &op_field, msg);
                return None;
            }
        },
    };
    match op_name {
        None if fields.get("tvmscript").is_some() => parse_tvmscript_op(ctx, fields, path, item),
        None => {
            if !fields.was_suggested("op") && !fields.was_suggested("tvmscript") {
                ctx.at(
                    item,
                    &op_field,
                    format!(
                        "missing `op` (one of: {}), or give a PrimFunc as `tvmscript:`",
                        OPS.join(", ")
                    ),
                );
            }
            None
        }
        Some(("tvmscript", _)) => parse_tvmscript_op(ctx, fields, path, item),
        Some((name, node)) => {
            let Some(kind) = OpKind::parse(name) else {
                ctx.at(
                    node,
                    &op_field,
                    format!(
                        "unknown op {}{} (valid ops: {})",
                        quote_text(name),
                        did_you_mean(name, &OPS),
                        OPS.join(", ")
                    ),
                );
                return None;
            };
            if let Some(key) = fields.key_node("tvmscript") {
                ctx.at(
                    key,
                    &join_field(path, "tvmscript"),
                    format!(
                        "cannot be combined with `op: {name}`: give either `op` + `shape` \
                         or `tvmscript`"
                    ),
                );
            }
            parse_shape(ctx, kind, fields, path, item)
        }
    }
}

pub(super) fn parse_tvmscript_op(
    ctx: &mut Ctx<'_>,
    fields: &Fields<'_>,
    path: &str,
    item: &Node,
) -> Option<Op> {
    let field = join_field(path, "tvmscript");
    if let Some(key) = fields.key_node("shape") {
        ctx.at(
            key,
            &join_field(path, "shape"),
            "is not used by a tvmscript workload (the PrimFunc defines its own shapes); \
             remove it"
                .into(),
        );
    }
    let Some(node) = fields.get("tvmscript") else {
        if !fields.was_suggested("tvmscript") {
            ctx.at(
                item,
                &field,
                "missing `tvmscript:` (the PrimFunc as TVMScript text) for `op: tvmscript`".into(),
            );
        }
        return None;
    };
    let text = match &node.value {
        Yaml::Str(s) => s,
        Yaml::Null => "",
        _ => {
            let msg = format!(
                "must be TVMScript text (use a block string: `tvmscript: |`), got {}",
                describe(node)
            );
            ctx.at(node, &field, msg);
            return None;
        }
    };
    match check_tvmscript(text) {
        Ok(()) => Some(Op::Tvmscript {
            tvmscript: normalise_tvmscript(text),
        }),
        Err(m) => {
            ctx.at(node, &field, m);
            None
        }
    }
}

/// Reads the numbers of one `shape:` mapping, reporting every problem.
pub(super) struct ShapeReader<'r, 'c, 'a> {
    ctx: &'r mut Ctx<'c>,
    fields: Fields<'a>,
    shape: &'a Node,
    path: String,
    kind: OpKind,
}

impl ShapeReader<'_, '_, '_> {
    fn number(&mut self, node: &Node, field: &str, min: u32) -> Option<u32> {
        let result = match &node.value {
            Yaml::Int(v) => check_range(*v, min),
            _ => Err(format!(
                "must be {}, got {}",
                if min == 0 {
                    "a non-negative integer"
                } else {
                    "a positive integer"
                },
                describe(node)
            )),
        };
        match result {
            Ok(v) => Some(v),
            Err(m) => {
                self.ctx.at(node, field, m);
                None
            }
        }
    }

    fn missing(&mut self, key: &str, what: &str) {
        if self.fields.was_suggested(key) {
            return;
        }
        let field = join_field(&self.path, key);
        let msg = format!(
            "missing `{key}` ({what}); op {} needs {}",
            self.kind.name(),
            self.kind.example()
        );
        self.ctx.at(self.shape, &field, msg);
    }

    fn dim(&mut self, key: &str) -> Option<u32> {
        match self.fields.get(key) {
            Some(node) => self.number(node, &join_field(&self.path, key), 1),
            None => {
                self.missing(key, "a positive integer");
                None
            }
        }
    }

    fn pair(&mut self, key: &str, default: Option<[u32; 2]>, min: u32) -> Option<[u32; 2]> {
        let field = join_field(&self.path, key);
        let Some(node) = self.fields.get(key) else {
            if default.is_none() {
                self.missing(key, "an integer or [height, width]");
            }
            return default;
        };
        match &node.value {
            Yaml::Int(_) => self.number(node, &field, min).map(|v| [v, v]),
            Yaml::Seq(items) => match items.as_slice() {
                [h, w] => {
                    let h = self.number(h, &format!("{field}[0]"), min);
                    let w = self.number(w, &format!("{field}[1]"), min);
                    Some([h?, w?])
                }
                _ => {
                    let msg = format!(
                        "must be one integer or a list of two integers [height, width], got {}",
                        describe(node)
                    );
                    self.ctx.at(node, &field, msg);
                    None
                }
            },
            _ => {
                let msg = format!(
                    "must be one integer or a list of two integers [height, width], got {}",
                    describe(node)
                );
                self.ctx.at(node, &field, msg);
                None
            }
        }
    }

    fn conv_pairs(&mut self) -> Option<[[u32; 2]; 4]> {
        let kernel = self.pair("kernel", None, 1);
        let stride = self.pair("stride", Some([1, 1]), 1);
        let padding = self.pair("padding", Some([0, 0]), 0);
        let dilation = self.pair("dilation", Some([1, 1]), 1);
        Some([kernel?, stride?, padding?, dilation?])
    }
}

/// The op of kind `kind` from the item's `shape:` mapping, or `None` with
/// every problem found reported to `ctx`.
pub(super) fn parse_shape(
    ctx: &mut Ctx<'_>,
    kind: OpKind,
    fields: &Fields<'_>,
    path: &str,
    item: &Node,
) -> Option<Op> {
    let shape_path = join_field(path, "shape");
    let (shape, entries) = shape_entries(ctx, kind, fields, &shape_path, item)?;
    let shape_fields = read_fields(ctx, entries, &shape_path, kind.shape_keys());
    let mut r = ShapeReader {
        ctx,
        fields: shape_fields,
        shape,
        path: shape_path,
        kind,
    };
    let op = r.op()?;
    r.check_geometry(op)
}

/// The item's `shape:` and its entries: it must be present (unless a
/// misspelling of it was already reported) and a mapping.
fn shape_entries<'a>(
    ctx: &mut Ctx<'_>,
    kind: OpKind,
    fields: &Fields<'a>,
    shape_path: &str,
    item: &Node,
) -> Option<(&'a Node, &'a [(Node, Node)])> {
    let Some(shape) = fields.get("shape") else {
        if !fields.was_suggested("shape") {
            ctx.at(
                item,
                shape_path,
                format!(
                    "missing `shape` for op {}: e.g. shape: {}",
                    kind.name(),
                    kind.example()
                ),
            );
        }
        return None;
    };
    let Yaml::Map(entries) = &shape.value else {
        let msg = format!(
            "must be a mapping like {}, got {}",
            kind.example(),
            describe(shape)
        );
        ctx.at(shape, shape_path, msg);
        return None;
    };
    Some((shape, entries))
}

impl ShapeReader<'_, '_, '_> {
    /// Reads every field of the op's shape before giving up on any, so that
    /// one pass reports every problem.
    fn op(&mut self) -> Option<Op> {
        match self.kind {
            OpKind::Matmul => self.matmul(),
            OpKind::BatchMatmul => self.batch_matmul(),
            OpKind::Dense => self.dense(),
            OpKind::Conv2dNchw | OpKind::Conv2dNhwc => self.conv2d(),
            OpKind::DepthwiseConv2dNchw => self.depthwise(),
        }
    }

    fn matmul(&mut self) -> Option<Op> {
        let (m, n, k) = (self.dim("m"), self.dim("n"), self.dim("k"));
        Some(Op::Matmul {
            shape: MatmulShape {
                m: m?,
                n: n?,
                k: k?,
            },
        })
    }

    fn batch_matmul(&mut self) -> Option<Op> {
        let (batch, m, n, k) = (
            self.dim("batch"),
            self.dim("m"),
            self.dim("n"),
            self.dim("k"),
        );
        Some(Op::BatchMatmul {
            shape: BatchMatmulShape {
                batch: batch?,
                m: m?,
                n: n?,
                k: k?,
            },
        })
    }

    fn dense(&mut self) -> Option<Op> {
        let batch = self.dim("batch");
        let in_features = self.dim("in_features");
        let out_features = self.dim("out_features");
        Some(Op::Dense {
            shape: DenseShape {
                batch: batch?,
                in_features: in_features?,
                out_features: out_features?,
            },
        })
    }

    /// NCHW or NHWC, as `self.kind` says: the same fields either way.
    fn conv2d(&mut self) -> Option<Op> {
        let batch = self.dim("batch");
        let in_channels = self.dim("in_channels");
        let height = self.dim("height");
        let width = self.dim("width");
        let out_channels = self.dim("out_channels");
        let [kernel, stride, padding, dilation] = self.conv_pairs()?;
        let shape = Conv2dShape {
            batch: batch?,
            in_channels: in_channels?,
            height: height?,
            width: width?,
            out_channels: out_channels?,
            kernel,
            stride,
            padding,
            dilation,
        };
        Some(if self.kind == OpKind::Conv2dNchw {
            Op::Conv2dNchw { shape }
        } else {
            Op::Conv2dNhwc { shape }
        })
    }

    fn depthwise(&mut self) -> Option<Op> {
        let batch = self.dim("batch");
        let channels = self.dim("channels");
        let height = self.dim("height");
        let width = self.dim("width");
        let multiplier = self.dim("multiplier");
        let [kernel, stride, padding, dilation] = self.conv_pairs()?;
        Some(Op::DepthwiseConv2dNchw {
            shape: DepthwiseConv2dShape {
                batch: batch?,
                channels: channels?,
                height: height?,
                width: width?,
                multiplier: multiplier?,
                kernel,
                stride,
                padding,
                dilation,
            },
        })
    }

    /// The op, or `None` with each geometry problem (a kernel larger than
    /// its padded input, ...) reported at the field it names, else at
    /// `shape:`.
    fn check_geometry(self, op: Op) -> Option<Op> {
        let problems = geometry_problems(&op);
        if problems.is_empty() {
            return Some(op);
        }
        for (sub, message) in problems {
            let node = sub.and_then(|s| self.fields.get(s)).unwrap_or(self.shape);
            self.ctx
                .at(node, &join_field(&self.path, sub.unwrap_or("")), message);
        }
        None
    }
}
