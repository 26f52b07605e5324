use super::*;

#[test]
fn parses_ranges_and_lists_and_prints_them_back_compactly() {
    let set = CpuSet::parse("4,0-2, 8 ,2").unwrap();
    assert_eq!(set.cpus(), &[0, 1, 2, 4, 8]);
    assert_eq!(set.to_string(), "0-2,4,8");
    assert_eq!(CpuSet::from_cpus([3, 1, 2]).unwrap().to_string(), "1-3");
}

#[test]
fn splits_cores_into_even_contiguous_groups() {
    let eight = CpuSet::parse("0-7").unwrap();
    let names = |groups: Vec<CpuSet>| groups.iter().map(|g| g.to_string()).collect::<Vec<_>>();
    assert_eq!(names(split_among(&eight, 4)), ["0-1", "2-3", "4-5", "6-7"]);
    assert_eq!(names(split_among(&eight, 3)), ["0-2", "3-5", "6-7"]);
    let odd = CpuSet::parse("0,2,4").unwrap();
    assert_eq!(names(split_among(&odd, 1)), ["0,2,4"]);
    // More workers than CPUs: they share.
    assert_eq!(names(split_among(&odd, 5)), ["0", "2", "4", "0", "2"]);
    assert!(split_among(&odd, 0).is_empty());
}

#[test]
fn auto_gives_each_worker_two_cores_and_never_none() {
    assert_eq!(auto_worker_count(1), 1);
    assert_eq!(auto_worker_count(2), 1);
    assert_eq!(auto_worker_count(3), 1);
    assert_eq!(auto_worker_count(16), 8);
}

#[test]
fn refuses_what_is_not_a_cpu_list() {
    assert_eq!(CpuSet::parse(""), Err(CpuSetError::Empty));
    assert!(matches!(CpuSet::parse("a-b"), Err(CpuSetError::Syntax(_))));
    assert!(matches!(CpuSet::parse("3-1"), Err(CpuSetError::Syntax(_))));
    assert_eq!(CpuSet::parse("0-4096"), Err(CpuSetError::OutOfRange(4096)));
}
