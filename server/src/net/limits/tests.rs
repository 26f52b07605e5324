use super::*;

#[test]
fn bucket_allows_a_burst_then_the_rate() {
    let t0 = Instant::now();
    let mut b = TokenBucket::per_second(10, t0);
    for _ in 0..20 {
        assert!(b.try_take(t0));
    }
    assert!(!b.try_take(t0));
    assert_eq!(b.wait(t0), Duration::from_millis(100));
    assert!(b.try_take(t0 + Duration::from_millis(100)));
    assert!(!b.try_take(t0 + Duration::from_millis(100)));
    // Refills to the burst, not beyond.
    let later = t0 + Duration::from_secs(60);
    for _ in 0..20 {
        assert!(b.try_take(later));
    }
    assert!(!b.try_take(later));
}

#[test]
fn zero_means_unlimited() {
    let t0 = Instant::now();
    let mut b = TokenBucket::per_second(0, t0);
    for _ in 0..100_000 {
        assert!(b.try_take(t0));
    }
    assert_eq!(b.wait(t0), Duration::ZERO);
    let mut l = RequestLimiter::new(0, t0);
    assert_eq!(l.check(t0), Verdict::Allow);
}

#[test]
fn a_flood_is_refused_then_closed_but_a_pause_forgives() {
    let t0 = Instant::now();
    let mut l = RequestLimiter::new(5, t0);
    let verdicts: Vec<Verdict> = (0..30).map(|_| l.check(t0)).collect();
    assert!(verdicts[..10].iter().all(|v| *v == Verdict::Allow));
    assert!(verdicts[10..20].iter().all(|v| *v == Verdict::Refuse));
    assert_eq!(verdicts[20], Verdict::Close);

    let mut l = RequestLimiter::new(5, t0);
    for _ in 0..10 {
        l.check(t0);
    }
    for _ in 0..10 {
        assert_eq!(l.check(t0), Verdict::Refuse);
    }
    // Two seconds of calm: the bucket refills and the strikes are forgotten.
    let t1 = t0 + Duration::from_secs(2);
    for _ in 0..10 {
        assert_eq!(l.check(t1), Verdict::Allow);
    }
    for _ in 0..10 {
        assert_eq!(l.check(t1), Verdict::Refuse);
    }
}
