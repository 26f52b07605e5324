//! The TVM runtime loaded once, a kernel's library opened, and its tensors
//! made and filled: the part of verification that calls C.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use tvm_ffi::tvm_ffi_sys::dlpack::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLTensor};
use tvm_ffi::{AnyView, Function, Module, NDAllocator, Tensor};

use super::numeric::{f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, SplitMix64};
use super::{ArgSpec, VerifyError, VerifyOptions};

/// The loaded runtime: its canonical path. The `dlopen` handle is never
/// closed, on purpose: kernels and TVM's global registry point into it.
pub(super) static RUNTIME: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();

/// `dlopen`s `libtvm_runtime.so` with `RTLD_NOW | RTLD_GLOBAL` the first time
/// it is called and keeps it loaded for the life of the process. Later calls
/// with the same file (after resolving symlinks) do nothing; another file is
/// an error, since two TVM runtimes cannot live in one process.
///
/// `libtvm_runtime.so` needs `libtvm_ffi.so`, which this binary already links
/// (found through the rpath that `build.rs` embeds), so the loader reuses it.
pub fn load_tvm_runtime(path: &Path) -> Result<(), VerifyError> {
    let fail = |reason: String| VerifyError::Runtime {
        path: path.to_path_buf(),
        reason,
    };
    let canonical = path.canonicalize().map_err(|e| fail(format!("{e}")))?;
    let slot = RUNTIME.get_or_init(|| Mutex::new(None));
    let mut loaded = slot.lock().unwrap_or_else(|poison| poison.into_inner());
    if let Some(existing) = loaded.as_ref() {
        if *existing == canonical {
            return Ok(());
        }
        return Err(fail(format!(
            "another TVM runtime is already loaded in this process ({})",
            existing.display()
        )));
    }
    let c_path = CString::new(canonical.as_os_str().as_encoded_bytes())
        .map_err(|_| fail("path contains a NUL byte".into()))?;
    // SAFETY: dlopen with a valid C string; the handle is intentionally leaked
    // (never dlclose'd) so the library stays for the process lifetime.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string or null.
        let reason = unsafe {
            let err = libc::dlerror();
            if err.is_null() {
                "dlopen failed".to_string()
            } else {
                CStr::from_ptr(err).to_string_lossy().into_owned()
            }
        };
        return Err(fail(reason));
    }
    *loaded = Some(canonical);
    Ok(())
}

// ---------------------------------------------------------------------------
// Kernels and tensors
// ---------------------------------------------------------------------------

pub(super) struct Kernel {
    /// Keeps the library loaded while `function` is used.
    pub(super) module: Module,
    pub(super) function: Function,
    pub(super) entry: String,
}

pub(super) fn load_kernel(path: &Path, entry: &str) -> Result<Kernel, VerifyError> {
    let load_err = |message: String| VerifyError::Load {
        path: path.to_path_buf(),
        message,
    };
    if !path.is_file() {
        return Err(load_err("no such file".into()));
    }
    let name = path
        .to_str()
        .ok_or_else(|| load_err("the path is not UTF-8".into()))?;
    let module = Module::load_from_file(name).map_err(|e| load_err(ffi_message(&e)))?;
    let missing = || VerifyError::MissingEntry {
        path: path.to_path_buf(),
        entry: entry.to_string(),
    };
    if !module
        .implements_function(entry, true)
        .map_err(|e| load_err(ffi_message(&e)))?
    {
        return Err(missing());
    }
    let function = module.get_function(entry).map_err(|_| missing())?;
    Ok(Kernel {
        module,
        function,
        entry: entry.to_string(),
    })
}

/// A TVM FFI error as `Kind: message` (the C++ backtrace is left out).
pub(super) fn ffi_message(error: &tvm_ffi::Error) -> String {
    format!("{}: {}", error.kind(), error.message())
}

/// Element types we can fill and compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Elem {
    F16,
    BF16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
}

impl Elem {
    pub(super) fn parse(dtype: &str) -> Option<Elem> {
        Some(match dtype {
            "float16" => Elem::F16,
            "bfloat16" => Elem::BF16,
            "float32" => Elem::F32,
            "float64" => Elem::F64,
            "int8" => Elem::I8,
            "int16" => Elem::I16,
            "int32" => Elem::I32,
            "int64" => Elem::I64,
            "uint8" => Elem::U8,
            "uint16" => Elem::U16,
            "uint32" => Elem::U32,
            "uint64" => Elem::U64,
            _ => return None,
        })
    }

    pub(super) fn bytes(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 => 1,
            Elem::F16 | Elem::BF16 | Elem::I16 | Elem::U16 => 2,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
        }
    }

    pub(super) fn is_float(self) -> bool {
        matches!(self, Elem::F16 | Elem::BF16 | Elem::F32 | Elem::F64)
    }

    pub(super) fn dl_data_type(self) -> DLDataType {
        let code = match self {
            Elem::F16 | Elem::F32 | Elem::F64 => DLDataTypeCode::kDLFloat,
            Elem::BF16 => DLDataTypeCode::kDLBfloat,
            Elem::I8 | Elem::I16 | Elem::I32 | Elem::I64 => DLDataTypeCode::kDLInt,
            Elem::U8 | Elem::U16 | Elem::U32 | Elem::U64 => DLDataTypeCode::kDLUInt,
        };
        DLDataType {
            code: code as u8,
            bits: (self.bytes() * 8) as u8,
            lanes: 1,
        }
    }

    /// One pseudo-random value, little-endian bytes appended to `out`.
    pub(super) fn push_random(self, rng: &mut SplitMix64, out: &mut Vec<u8>) {
        // Floats: uniform in [-1, 1).
        let x = rng.next_f64() * 2.0 - 1.0;
        let small = |range: i64, rng: &mut SplitMix64| -> i64 {
            (rng.next_u64() % (2 * range as u64 + 1)) as i64 - range
        };
        match self {
            Elem::F16 => out.extend_from_slice(&f32_to_f16_bits(x as f32).to_le_bytes()),
            Elem::BF16 => out.extend_from_slice(&f32_to_bf16_bits(x as f32).to_le_bytes()),
            Elem::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
            Elem::F64 => out.extend_from_slice(&x.to_le_bytes()),
            Elem::I8 => out.extend_from_slice(&(small(2, rng) as i8).to_le_bytes()),
            Elem::I16 => out.extend_from_slice(&(small(2, rng) as i16).to_le_bytes()),
            Elem::I32 => out.extend_from_slice(&(small(8, rng) as i32).to_le_bytes()),
            Elem::I64 => out.extend_from_slice(&small(8, rng).to_le_bytes()),
            Elem::U8 => out.push((rng.next_u64() % 4) as u8),
            Elem::U16 => out.extend_from_slice(&((rng.next_u64() % 4) as u16).to_le_bytes()),
            Elem::U32 => out.extend_from_slice(&((rng.next_u64() % 4) as u32).to_le_bytes()),
            Elem::U64 => out.extend_from_slice(&(rng.next_u64() % 4).to_le_bytes()),
        }
    }

    /// The element at `bytes` (little-endian) as f64 (exact for all but
    /// 64-bit integers beyond 2^53, which are compared bitwise anyway).
    pub(super) fn to_f64(self, bytes: &[u8]) -> f64 {
        let a = |n: usize| -> [u8; 8] {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&bytes[..n]);
            b
        };
        match self {
            Elem::F16 => f64::from(f16_bits_to_f32(u16::from_le_bytes([bytes[0], bytes[1]]))),
            Elem::BF16 => f64::from(f32::from_bits(
                u32::from(u16::from_le_bytes([bytes[0], bytes[1]])) << 16,
            )),
            Elem::F32 => f64::from(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            Elem::F64 => f64::from_le_bytes(a(8)),
            Elem::I8 => f64::from(bytes[0] as i8),
            Elem::I16 => f64::from(i16::from_le_bytes([bytes[0], bytes[1]])),
            Elem::I32 => f64::from(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            Elem::I64 => i64::from_le_bytes(a(8)) as f64,
            Elem::U8 => f64::from(bytes[0]),
            Elem::U16 => f64::from(u16::from_le_bytes([bytes[0], bytes[1]])),
            Elem::U32 => f64::from(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            Elem::U64 => u64::from_le_bytes(a(8)) as f64,
        }
    }
}

/// Validates the argument list; returns each argument's element type.
pub(super) fn check_args(
    args: &[ArgSpec],
    outputs: &[usize],
    options: &VerifyOptions,
) -> Result<Vec<Elem>, VerifyError> {
    if args.is_empty() {
        return Err(VerifyError::BadArgs("the kernel has no arguments".into()));
    }
    if outputs.is_empty() {
        return Err(VerifyError::BadArgs("no output argument to compare".into()));
    }
    let mut elems = Vec::with_capacity(args.len());
    // Inputs exist twice (one copy per kernel), and so do outputs.
    let mut total_bytes: u128 = 0;
    for (index, arg) in args.iter().enumerate() {
        let elem = Elem::parse(&arg.dtype).ok_or_else(|| VerifyError::UnsupportedDtype {
            index,
            dtype: arg.dtype.clone(),
        })?;
        if arg.shape.iter().any(|&d| d <= 0) {
            return Err(VerifyError::BadArgs(format!(
                "argument {index} has shape {:?}; every dimension must be positive",
                arg.shape
            )));
        }
        let numel = arg
            .shape
            .iter()
            .try_fold(1u128, |acc, &d| acc.checked_mul(d as u128))
            .unwrap_or(u128::MAX);
        total_bytes = total_bytes.saturating_add(numel.saturating_mul(elem.bytes() as u128 * 2));
        elems.push(elem);
    }
    if total_bytes > u128::from(options.max_total_bytes) {
        return Err(VerifyError::BadArgs(format!(
            "the arguments need {total_bytes} bytes, more than the limit of {}",
            options.max_total_bytes
        )));
    }
    let mut seen = vec![false; args.len()];
    for &output in outputs {
        if output >= args.len() {
            return Err(VerifyError::BadArgs(format!(
                "output index {output} is out of range ({} arguments)",
                args.len()
            )));
        }
        if std::mem::replace(&mut seen[output], true) {
            return Err(VerifyError::BadArgs(format!(
                "output index {output} is listed twice"
            )));
        }
    }
    Ok(elems)
}

/// A guess at the reduction length from the shapes alone: with the two
/// largest inputs `a`, `b` and the largest output `c` (element counts),
/// `sqrt(a * b / c)`, which is exactly `k` for a matmul (`mk * kn / mn`) and
/// `in_features` for a dense layer, and about `C * sqrt(kh * kw)` for a
/// convolution (low by `sqrt(kh * kw)`); with one input, `a / c`. At least 1.
/// Callers that know the op pass [`VerifyOptions::reduction_len`] instead.
pub(super) fn estimate_reduction_len(args: &[ArgSpec], outputs: &[usize]) -> u64 {
    let numel = |a: &ArgSpec| a.shape.iter().map(|&d| d.max(1) as f64).product::<f64>();
    let mut inputs: Vec<f64> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| !outputs.contains(i))
        .map(|(_, a)| numel(a))
        .collect();
    inputs.sort_by(|a, b| b.total_cmp(a));
    let output = outputs
        .iter()
        .map(|&i| numel(&args[i]))
        .fold(1.0f64, f64::max);
    let estimate = match inputs.as_slice() {
        [] => 1.0,
        [a] => a / output,
        [a, b, ..] => (a * b / output).sqrt(),
    };
    if estimate.is_finite() {
        (estimate.round() as u64).max(1)
    } else {
        1
    }
}

/// Allocates zeroed, 64-byte aligned CPU memory (the alignment TVM assumes).
/// An allocation failure leaves the data pointer null, which
/// [`make_tensors`] turns into an error before any kernel sees the tensor
/// (tvm-ffi's own `CPUNDAlloc` neither zeroes nor checks for null).
pub(super) struct ZeroedCpuAlloc;

// SAFETY: alloc_data returns null or memory of the size the prototype
// describes (at least one byte), aligned to MIN_ALIGN; free_data frees it with
// the same layout and ignores null.
unsafe impl NDAllocator for ZeroedCpuAlloc {
    const MIN_ALIGN: usize = 64;

    unsafe fn alloc_data(&mut self, prototype: &DLTensor) -> *mut core::ffi::c_void {
        std::alloc::alloc_zeroed(dl_layout(prototype)).cast()
    }

    unsafe fn free_data(&mut self, tensor: &DLTensor) {
        if !tensor.data.is_null() {
            std::alloc::dealloc(tensor.data.cast(), dl_layout(tensor));
        }
    }
}

/// Layout of a compact DLTensor's data (at least one byte).
///
/// # Safety
/// `tensor.shape` must point to `tensor.ndim` dimensions.
pub(super) unsafe fn dl_layout(tensor: &DLTensor) -> std::alloc::Layout {
    let dims = std::slice::from_raw_parts(tensor.shape, tensor.ndim.max(0) as usize);
    let numel: usize = dims.iter().map(|&d| d.max(0) as usize).product();
    let item = (usize::from(tensor.dtype.bits) * usize::from(tensor.dtype.lanes)).div_ceil(8);
    std::alloc::Layout::from_size_align((numel * item).max(1), ZeroedCpuAlloc::MIN_ALIGN)
        .expect("tensor layout")
}

pub(super) fn cpu() -> DLDevice {
    DLDevice::new(DLDeviceType::kDLCPU, 0)
}

/// Inputs filled from the seed (one stream per argument, so an argument's
/// data does not depend on the others'), outputs zeroed.
pub(super) fn make_tensors(
    args: &[ArgSpec],
    elems: &[Elem],
    outputs: &[usize],
    seed: u64,
) -> Result<Vec<Tensor>, VerifyError> {
    let mut tensors = Vec::with_capacity(args.len());
    for (index, (arg, &elem)) in args.iter().zip(elems).enumerate() {
        let tensor = Tensor::from_nd_alloc(ZeroedCpuAlloc, &arg.shape, elem.dl_data_type(), cpu());
        let bytes = tensor.numel() * elem.bytes();
        let no_memory = || {
            VerifyError::BadArgs(format!(
                "cannot allocate {bytes} bytes for argument {index}"
            ))
        };
        if tensor.data_ptr().is_null() {
            return Err(no_memory());
        }
        if !outputs.contains(&index) {
            let mut rng =
                SplitMix64::new(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut data = Vec::new();
            data.try_reserve_exact(bytes).map_err(|_| no_memory())?;
            for _ in 0..tensor.numel() {
                elem.push_random(&mut rng, &mut data);
            }
            // SAFETY: the tensor owns numel * bytes bytes of compact CPU memory
            // that nothing else references yet.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    tensor.data_ptr() as *mut u8,
                    data.len(),
                );
            }
        }
        tensors.push(tensor);
    }
    Ok(tensors)
}

/// The raw bytes of a compact CPU tensor.
pub(super) fn tensor_bytes(tensor: &Tensor) -> &[u8] {
    let item = (usize::from(tensor.dtype().bits) * usize::from(tensor.dtype().lanes)).div_ceil(8);
    // SAFETY: tensors made by make_tensors are compact CPU memory of numel *
    // item bytes, alive as long as `tensor`.
    unsafe { std::slice::from_raw_parts(tensor.data_ptr() as *const u8, tensor.numel() * item) }
}

pub(super) fn call(function: &Function, tensors: &[Tensor]) -> Result<(), String> {
    let views: Vec<AnyView<'_>> = tensors.iter().map(AnyView::from).collect();
    function
        .call_packed(&views)
        .map(drop)
        .map_err(|e| ffi_message(&e))
}
