use super::*;

#[test]
fn a_gpu_reads_as_name_index_and_memory() {
    let gpu = Device {
        kind: "gpu".into(),
        name: "NVIDIA H200".into(),
        memory_mib: Some(143_771),
        index: Some(0),
        uuid: Some("GPU-1".into()),
    };
    assert_eq!(gpu.to_string(), "NVIDIA H200 #0, 140 GiB");
    assert!(gpu.is_gpu());
    let cpu = Device {
        kind: "cpu".into(),
        name: "AMD EPYC".into(),
        memory_mib: Some(2048),
        index: None,
        uuid: None,
    };
    assert_eq!(cpu.to_string(), "AMD EPYC, 2.0 GiB");
}

#[test]
fn absent_fields_stay_off_the_wire() {
    let cpu = Device {
        kind: "cpu".into(),
        name: "x".into(),
        memory_mib: None,
        index: None,
        uuid: None,
    };
    assert_eq!(
        serde_json::to_string(&cpu).unwrap(),
        r#"{"kind":"cpu","name":"x"}"#
    );
}
