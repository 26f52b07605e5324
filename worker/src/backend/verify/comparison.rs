//! The tuned kernel's outputs against the reference's, element by element,
//! within the dtype's tolerance.

use super::kernel::Elem;
use super::Tolerance;

pub(super) struct Comparison {
    pub(super) elements: usize,
    pub(super) mismatches: usize,
    /// (flat index, tuned, reference) of the first element out of tolerance.
    pub(super) first_mismatch: Option<(usize, f64, f64)>,
    pub(super) max_abs_error: f64,
    pub(super) max_rel_error: f64,
    pub(super) atol_eff: f64,
}

pub(super) fn compare(
    elem: Elem,
    tuned: &[u8],
    reference: &[u8],
    tolerance: Tolerance,
    reduction_len: u64,
) -> Comparison {
    let size = elem.bytes();
    let atol_eff = if elem.is_float() {
        tolerance.atol * (reduction_len.max(1) as f64).sqrt()
    } else {
        tolerance.atol
    };
    let mut out = Comparison {
        elements: tuned.len() / size,
        mismatches: 0,
        first_mismatch: None,
        max_abs_error: 0.0,
        max_rel_error: 0.0,
        atol_eff,
    };
    for (index, (t, r)) in tuned
        .chunks_exact(size)
        .zip(reference.chunks_exact(size))
        .enumerate()
    {
        let (tv, rv) = (elem.to_f64(t), elem.to_f64(r));
        let ok = if !elem.is_float() {
            // Integers: exact, bitwise (f64 is not exact for large 64-bit values).
            t == r || (tv - rv).abs() <= atol_eff + tolerance.rtol * rv.abs()
        } else if tv.is_nan() || rv.is_nan() {
            tv.is_nan() && rv.is_nan()
        } else if tv.is_infinite() || rv.is_infinite() {
            tv == rv
        } else {
            (tv - rv).abs() <= atol_eff + tolerance.rtol * rv.abs()
        };
        let diff = if t == r { 0.0 } else { (tv - rv).abs() };
        let diff = if diff.is_nan() { f64::INFINITY } else { diff };
        out.max_abs_error = out.max_abs_error.max(diff);
        if rv.abs() > atol_eff {
            out.max_rel_error = out.max_rel_error.max(diff / rv.abs());
        }
        if !ok {
            out.mismatches += 1;
            if out.first_mismatch.is_none() {
                out.first_mismatch = Some((index, tv, rv));
            }
        }
    }
    out
}
