use super::*;

/// `nvidia-smi --query-gpu=index,uuid,name,memory.total,compute_cap,driver_version
/// --format=csv,noheader,nounits` on the one-GPU H200 machine (driver 580).
const H200: &str =
    "0, GPU-5e0b4c6a-7f5c-2d1e-9a1b-0c2d3e4f5a6b, NVIDIA H200, 143771, 9.0, 580.159.03\n";

/// The same query on an eight-GPU A100 host, and on a T4 with a name that
/// holds a comma (some OEM boards), memory unreported (`[N/A]`).
const A100X8: &str = "\
0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA A100-SXM4-80GB, 81920, 8.0, 550.54.15
1, GPU-aaaaaaaa-1111-0000-0000-000000000000, NVIDIA A100-SXM4-80GB, 81920, 8.0, 550.54.15
2, GPU-bbbbbbbb-2222-0000-0000-000000000000, NVIDIA A100-SXM4-80GB, 81920, 8.0, 550.54.15
3, GPU-bbbbbbbb-3333-0000-0000-000000000000, NVIDIA A100-SXM4-80GB, 81920, 8.0, 550.54.15
";
const ODD: &str = "0, GPU-cccc, Tesla T4, Rev. B, [N/A], 7.5, [N/A]\n";

fn gpus(text: &str) -> Vec<Gpu> {
    parse_query(text).expect("parses")
}

#[test]
fn an_h200_is_one_sm_90_gpu_with_its_memory() {
    let found = gpus(H200);
    assert_eq!(found.len(), 1);
    let gpu = &found[0];
    assert_eq!(gpu.index, 0);
    assert_eq!(gpu.name, "NVIDIA H200");
    assert_eq!(gpu.memory_mib, Some(143_771));
    assert_eq!(gpu.compute_cap, (9, 0));
    assert_eq!(gpu.driver_version.as_deref(), Some("580.159.03"));
    assert_eq!(gpu.arch(), "sm_90");
    assert_eq!(gpu.device().to_string(), "NVIDIA H200 #0, 140 GiB");
}

#[test]
fn the_target_pins_what_kernels_depend_on_with_tvm_names() {
    let target = gpus(H200)[0].target();
    assert_eq!(target.kind(), "cuda");
    let attrs = target.attrs();
    assert_eq!(attrs["arch"], "sm_90");
    assert_eq!(attrs["max_threads_per_block"], 1024);
    assert_eq!(attrs["max_shared_memory_per_block"], 49152);
    assert_eq!(attrs["thread_warp_size"], 32);
    // A job that leaves the GPU open runs here and is completed by it; one
    // for another architecture does not.
    let open = Target::parse(r#"{"kind":"cuda"}"#).unwrap();
    assert!(target.serves(&open));
    assert_eq!(open.completed_by(&target), target);
    let ampere = Target::parse(r#"{"kind":"cuda","arch":"sm_80"}"#).unwrap();
    assert!(!target.serves(&ampere));
    assert!(!target.serves(&Target::of_kind("llvm")));
}

#[test]
fn names_with_commas_and_unreported_fields_parse() {
    let gpu = &gpus(ODD)[0];
    assert_eq!(gpu.name, "Tesla T4, Rev. B");
    assert_eq!(gpu.memory_mib, None);
    assert_eq!(gpu.arch(), "sm_75");
    assert_eq!(gpu.driver_version, None);
}

#[test]
fn output_it_cannot_read_is_an_error_naming_the_line() {
    for (text, says) in [
        ("0, GPU-x, NVIDIA H200\n", "6 comma-separated"),
        ("zero, GPU-x, H200, 1, 9.0, 580\n", "index"),
        ("0, GPU-x, H200, 1, [N/A], 580\n", "compute capability"),
    ] {
        let err = parse_query(text).unwrap_err().to_string();
        assert!(err.contains("line 1") && err.contains(says), "{err}");
    }
    assert_eq!(parse_query("\n\n").unwrap(), Vec::new());
}

#[test]
fn gpus_selects_by_index_in_the_order_given() {
    let all = gpus(A100X8);
    let chosen = select(&all, &GpuSelection::parse("2,0").unwrap(), None).unwrap();
    let indices: Vec<u32> = chosen.iter().map(|g| g.index).collect();
    assert_eq!(indices, [2, 0]);
    assert_eq!(select(&all, &GpuSelection::All, None).unwrap().len(), 4);
    assert!(select(&all, &GpuSelection::parse("none").unwrap(), None)
        .unwrap()
        .is_empty());
}

#[test]
fn gpus_refuses_what_the_host_or_cuda_visible_devices_does_not_have() {
    let all = gpus(A100X8);
    let err = select(&all, &GpuSelection::parse("0,7").unwrap(), None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "--gpus: GPU 7 is not on this host (nvidia-smi lists 0, 1, 2, 3)"
    );
    let err = select(&all, &GpuSelection::parse("1").unwrap(), Some("2,3")).unwrap_err();
    assert!(
        err.to_string().contains("CUDA_VISIBLE_DEVICES=2,3"),
        "{err}"
    );
    for bad in ["0,x", "-1", "1.5"] {
        assert!(
            matches!(GpuSelection::parse(bad), Err(GpuError::BadSelection(_))),
            "{bad}"
        );
    }
}

#[test]
fn cuda_visible_devices_limits_the_gpus_as_cuda_reads_it() {
    let all = gpus(A100X8);
    let indices =
        |v: Option<&str>| -> Vec<u32> { visible(&all, v).iter().map(|g| g.index).collect() };
    assert_eq!(indices(None), [0, 1, 2, 3]);
    assert_eq!(indices(Some("3,1")), [3, 1]);
    assert_eq!(indices(Some("")), Vec::<u32>::new());
    assert_eq!(indices(Some("-1")), Vec::<u32>::new());
    // A unique UUID prefix names a GPU; an ambiguous one ends the list, as
    // does an index that is not there.
    assert_eq!(indices(Some("GPU-bbbbbbbb-3333")), [3]);
    assert_eq!(indices(Some("1,GPU-aaaaaaaa,2")), [1]);
    assert_eq!(indices(Some("0,9,1")), [0]);
}
