use super::*;

#[test]
fn round_trips_every_length() {
    for len in 0..40usize {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
        assert_eq!(decode(&encode(&bytes)).unwrap(), bytes, "len {len}");
    }
    assert_eq!(encode(b"foobar"), "Zm9vYmFy");
    assert_eq!(encode(b"fo"), "Zm8=");
}

#[test]
fn refuses_garbage() {
    assert!(decode("Zm9v!mFy").is_err());
    assert!(decode("Zm9").is_err());
    assert!(decode("Zm==Zm9v").is_err());
}
