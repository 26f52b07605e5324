//! Test kernels compiled with the venv's TVM, shared with the backend tests.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python with TVM the tests use: `TUNEFLEET_TEST_PYTHON`, else the
/// repository's `.venv`.
pub(crate) fn python() -> PathBuf {
    std::env::var_os("TUNEFLEET_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"))
}

/// Compiles `n`x`n`x`n` matmuls (`C = A·B`, entry `main`) into `dir`:
/// for every dtype `<dtype>-reference.so` (no schedule) and
/// `<dtype>-tuned.so` (tiled, vectorised, parallel), and for float32 also
/// `float32-wrong.so` (computes `A·B + 1`). Returns the path of
/// libtvm_runtime.so.
pub(crate) fn build_matmuls(dir: &Path, n: u32, dtypes: &[&str]) -> PathBuf {
    let output = Command::new(python())
        .arg("-c")
        .arg(SCRIPT)
        .arg(dir)
        .arg(n.to_string())
        .args(dtypes)
        .output()
        .expect("run the fixture script with the venv python");
    assert!(
        output.status.success(),
        "fixture script failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    PathBuf::from(stdout.lines().last().expect("runtime path").trim())
}

const SCRIPT: &str = r#"
import os, sys
import tvm
import tvm.libinfo
import tvm.s_tir
from tvm import te

out, n, dtypes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def matmul(dtype, plus_one=False):
    A = te.placeholder((n, n), dtype, name="A")
    B = te.placeholder((n, n), dtype, name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    if plus_one:
        D = te.compute((n, n), lambda i, j: C[i, j] + tvm.tirx.const(1, dtype), name="D")
        return te.create_prim_func([A, B, D])
    return te.create_prim_func([A, B, C])

def build(func, name, tile=False):
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    if tile:
        sch = tvm.s_tir.Schedule(mod)
        i, j, k = sch.get_loops(sch.get_sblock("C"))
        io, ii = sch.split(i, [None, 8])
        jo, ji = sch.split(j, [None, 16])
        sch.reorder(io, jo, k, ii, ji)
        sch.vectorize(ji)
        sch.parallel(io)
        mod = sch.mod
    tvm.compile(mod, target="llvm").export_library(os.path.join(out, name))

for dtype in dtypes:
    build(matmul(dtype), dtype + "-reference.so")
    build(matmul(dtype), dtype + "-tuned.so", tile=True)
    if dtype == "float32":
        build(matmul(dtype, plus_one=True), dtype + "-wrong.so")
print(tvm.libinfo.find_libtvm_runtime())
"#;
