use super::*;

#[cfg(target_os = "linux")]
#[test]
fn pinning_a_thread_shows_in_available_parallelism() {
    // In a thread of its own: the mask must not leak into other tests.
    std::thread::spawn(|| {
        pin_current_process(&CpuSet::parse("0").unwrap()).unwrap();
        assert_eq!(std::thread::available_parallelism().unwrap().get(), 1);
    })
    .join()
    .unwrap();
}
