use super::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn ceiling_doubles_then_caps() {
    let mut state = Backoff {
        initial: ms(200),
        max: ms(10_000),
    }
    .start();
    let mut rng = StdRng::seed_from_u64(1);
    let mut ceilings = Vec::new();
    for _ in 0..12 {
        ceilings.push(state.ceiling());
        state.next_delay_with(&mut rng);
    }
    assert_eq!(
        ceilings[..7],
        [
            ms(200),
            ms(400),
            ms(800),
            ms(1600),
            ms(3200),
            ms(6400),
            ms(10_000)
        ]
    );
    assert!(ceilings[7..].iter().all(|c| *c == ms(10_000)));
}

#[test]
fn delays_are_jittered_within_bounds() {
    let mut rng = StdRng::seed_from_u64(7);
    for attempt in 0..40 {
        let mut state = Backoff::default().start();
        for _ in 0..attempt {
            state.next_delay_with(&mut rng);
        }
        let ceiling = state.ceiling();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let mut probe = state.clone();
            let d = probe.next_delay_with(&mut rng);
            assert!(d >= ceiling / 2 && d <= ceiling, "{d:?} vs {ceiling:?}");
            assert!(d <= ms(10_000));
            seen.insert(d);
        }
        assert!(seen.len() > 10, "delays are not jittered: {seen:?}");
    }
}

#[test]
fn reset_starts_over_and_degenerate_settings_are_safe() {
    let mut state = Backoff::default().start();
    for _ in 0..5 {
        state.next_delay();
    }
    assert_eq!(state.attempts(), 5);
    state.reset();
    assert_eq!(state.ceiling(), ms(200));

    let mut odd = Backoff {
        initial: Duration::ZERO,
        max: Duration::ZERO,
    }
    .start();
    for _ in 0..100 {
        assert!(odd.next_delay() <= ms(1));
    }
    let mut inverted = Backoff {
        initial: ms(500),
        max: ms(100),
    }
    .start();
    assert!(inverted.next_delay() <= ms(500));
}
