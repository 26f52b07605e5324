use super::*;
use crate::gpu::parse_query;

const TWO_H200: &str = "\
0, GPU-0000, NVIDIA H200, 143771, 9.0, 580.159.03
1, GPU-1111, NVIDIA H200, 143771, 9.0, 580.159.03
";

fn host() -> (Target, Device) {
    let target = Target::parse(r#"{"kind":"llvm","mcpu":"znver4","num-cores":16}"#).unwrap();
    (
        target,
        cpu_device(
            "model name\t: AMD EPYC 9B14\n",
            "MemTotal:  131072000 kB\n",
            16,
        ),
    )
}

fn gpus() -> Vec<Gpu> {
    parse_query(TWO_H200).unwrap()
}

fn tvm() -> PlanOptions {
    PlanOptions {
        needs_device: true,
        ..PlanOptions::default()
    }
}

fn given(text: &str) -> TargetChoice {
    TargetChoice::Given(Target::parse(text).unwrap())
}

#[test]
fn auto_on_a_gpu_host_is_a_cuda_slot_per_gpu_each_on_its_own_card() {
    let slots = plan(&TargetChoice::Auto, &gpus(), host(), &tvm(), "").unwrap();
    assert_eq!(slots.len(), 2);
    for (i, slot) in slots.iter().enumerate() {
        assert_eq!(slot.target.kind(), "cuda");
        assert_eq!(slot.target.attrs()["arch"], "sm_90");
        assert_eq!(
            slot.device.to_string(),
            format!("NVIDIA H200 #{i}, 140 GiB")
        );
        assert_eq!(
            slot.env(),
            vec![(
                "CUDA_VISIBLE_DEVICES".to_string(),
                format!("GPU-{}", ["0000", "1111"][i])
            )]
        );
        assert_eq!(slot.name("box", 2), format!("box-gpu{i}"));
    }
}

#[test]
fn auto_without_gpus_is_the_cpu_worker_it_always_was() {
    let slots = plan(&TargetChoice::Auto, &[], host(), &tvm(), "no nvidia-smi").unwrap();
    assert_eq!(slots.len(), 1);
    assert_eq!(slots[0].target, host().0);
    assert_eq!(
        slots[0].device.to_string(),
        "AMD EPYC 9B14 (16 cores), 125 GiB"
    );
    assert!(slots[0].env().is_empty());
    assert_eq!(slots[0].name("box", 1), "box");
}

#[test]
fn cpu_slot_serves_the_cpu_beside_the_gpus() {
    let options = PlanOptions {
        cpu_slot: true,
        ..tvm()
    };
    let slots = plan(&TargetChoice::Auto, &gpus()[..1], host(), &options, "").unwrap();
    let kinds: Vec<&str> = slots.iter().map(|s| s.target.kind()).collect();
    assert_eq!(kinds, ["cuda", "llvm"]);
    assert_eq!(slots[1].name("box", 2), "box");
}

#[test]
fn a_given_cuda_target_keeps_what_it_pins_and_takes_the_rest_from_the_gpu() {
    let slots = plan(
        &given(r#"{"kind":"cuda","max_threads_per_block":512}"#),
        &gpus(),
        host(),
        &tvm(),
        "",
    )
    .unwrap();
    assert_eq!(slots.len(), 2);
    assert_eq!(slots[0].target.attrs()["max_threads_per_block"], 512);
    assert_eq!(slots[0].target.attrs()["arch"], "sm_90");
    let ok = plan(
        &given(r#"{"kind":"cuda","arch":"sm_90a"}"#),
        &gpus(),
        host(),
        &tvm(),
        "",
    )
    .unwrap();
    assert_eq!(ok[0].target.attrs()["arch"], "sm_90a");
}

#[test]
fn refusals_say_what_is_wrong() {
    let err = plan(
        &given(r#"{"kind":"cuda","arch":"sm_80"}"#),
        &gpus(),
        host(),
        &tvm(),
        "",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "--target asks for arch sm_80, but GPU 0 (NVIDIA H200) is sm_90: its code would not run there"
    );
    let err = plan(
        &given(r#"{"kind":"cuda"}"#),
        &[],
        host(),
        &tvm(),
        "nvidia-smi is not installed",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("no NVIDIA GPU to run it on (nvidia-smi is not installed)"),
        "{err}"
    );
    let options = PlanOptions {
        gpus_given: true,
        ..tvm()
    };
    let err = plan(&given(r#"{"kind":"llvm"}"#), &gpus(), host(), &options, "").unwrap_err();
    assert!(matches!(err, PlanError::GpusWithCpuTarget(_)), "{err}");
    let options = PlanOptions {
        cpu_slot: true,
        ..tvm()
    };
    let err = plan(&given(r#"{"kind":"llvm"}"#), &gpus(), host(), &options, "").unwrap_err();
    assert_eq!(err, PlanError::CpuSlotWithoutGpuTarget);
}

#[test]
fn a_sim_worker_takes_a_cuda_target_without_a_gpu() {
    let slots = plan(
        &given(r#"{"kind":"cuda","arch":"sm_90"}"#),
        &[],
        host(),
        &PlanOptions::default(),
        "",
    )
    .unwrap();
    assert_eq!(slots.len(), 1);
    assert_eq!(slots[0].target.attrs()["arch"], "sm_90");
    assert!(slots[0].device.is_gpu() && slots[0].gpu.is_none());
}

#[test]
fn a_cpu_without_a_model_name_is_named_by_its_architecture() {
    let device = cpu_device("processor: 0\n", "", 2);
    assert_eq!(device.name, format!("{} (2 cores)", std::env::consts::ARCH));
    assert_eq!(device.memory_mib, None);
}
