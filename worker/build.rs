//! Build script of the worker.
//!
//! Without the `tvm` feature it does nothing. With it, the worker links
//! `libtvm_ffi.so` (through the `tvm-ffi` crate), which lives in the Python
//! package `apache-tvm-ffi` (`.../site-packages/tvm_ffi/lib`), not in a system
//! directory. The `tvm-ffi` crate only sets `LD_LIBRARY_PATH` for its own
//! `cargo run`/`cargo test`, which does not reach this package's binaries, so we
//! embed that directory as an rpath into every binary of this package (the
//! `tunefleet-worker` executable and the test executables): the worker then
//! runs without `LD_LIBRARY_PATH`.
//!
//! The directory comes from `tvm-ffi-config --libdir`, as for the `tvm-ffi`
//! crate itself: put the venv's `bin` on `PATH` when building, e.g.
//! `PATH=$PWD/.venv/bin:$PATH cargo build -p tunefleet-worker --features tvm`.
//! `TUNEFLEET_TVM_FFI_LIBDIR` overrides the lookup (packaging, cross builds).
//!
//! `libtvm_runtime.so` (from the `apache-tvm` wheel) is not linked: the
//! backend `dlopen`s it at run time from the path the tuning driver reports.

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_TVM");
    if env::var_os("CARGO_FEATURE_TVM").is_none() {
        return;
    }
    println!("cargo:rerun-if-env-changed=PATH");
    println!("cargo:rerun-if-env-changed=TUNEFLEET_TVM_FFI_LIBDIR");

    let libdir = match env::var("TUNEFLEET_TVM_FFI_LIBDIR") {
        Ok(dir) if !dir.trim().is_empty() => dir.trim().to_string(),
        _ => match tvm_ffi_config_libdir() {
            Ok(dir) => dir,
            Err(reason) => panic!(
                "{reason}. The `tvm` feature of tunefleet-worker needs the directory of \
                 libtvm_ffi.so: put the Python environment that has apache-tvm-ffi first on \
                 PATH (e.g. PATH=$PWD/.venv/bin:$PATH) or set TUNEFLEET_TVM_FFI_LIBDIR."
            ),
        },
    };
    if !Path::new(&libdir).join("libtvm_ffi.so").exists() {
        println!("cargo:warning=libtvm_ffi.so is not in {libdir}; the worker may not start");
    }
    // `rustc-link-arg` reaches every linked target of this package: the
    // binaries, unit and integration tests, examples and benches.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{libdir}");
    // Expose it to the code too (used in error messages and tests).
    println!("cargo:rustc-env=TUNEFLEET_TVM_FFI_LIBDIR={libdir}");
}

fn tvm_ffi_config_libdir() -> Result<String, String> {
    let output = Command::new("tvm-ffi-config")
        .arg("--libdir")
        .output()
        .map_err(|e| format!("cannot run `tvm-ffi-config --libdir`: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`tvm-ffi-config --libdir` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let dir = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if dir.is_empty() {
        return Err("`tvm-ffi-config --libdir` printed nothing".to_string());
    }
    Ok(dir)
}
