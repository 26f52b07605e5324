use super::*;
use tunefleet_shared::protocol::Millis;

#[test]
fn create_check_revoke() {
    let registry = TokenRegistry::default();
    let mut book = TokenBook::load(Vec::new(), registry.clone());
    let changes = book.create("alice", "s3cret", Millis(5)).unwrap();
    assert_eq!(changes[0].0, "token:alice");
    assert!(
        !changes[0].1.as_deref().unwrap().contains("s3cret"),
        "only a hash is stored"
    );
    assert_eq!(registry.name_of("s3cret").as_deref(), Some("alice"));
    assert_eq!(registry.name_of("wrong"), None);
    assert_eq!(
        book.create("alice", "x", Millis(6)),
        Err(TokenError::Exists("alice".into()))
    );
    assert!(matches!(
        book.create("admin", "x", Millis(6)),
        Err(TokenError::BadName(_))
    ));
    assert!(matches!(
        book.create("a b", "x", Millis(6)),
        Err(TokenError::BadName(_))
    ));
    // What was stored loads back into a working registry.
    let registry2 = TokenRegistry::default();
    let row = (changes[0].0.clone(), changes[0].1.clone().unwrap());
    let book2 = TokenBook::load(vec![row], registry2.clone());
    assert_eq!(book2.list()[0].name, "alice");
    assert_eq!(registry2.name_of("s3cret").as_deref(), Some("alice"));

    assert_eq!(
        book.revoke("alice").unwrap(),
        vec![("token:alice".into(), None)]
    );
    assert_eq!(registry.name_of("s3cret"), None);
    assert!(!registry.has_name("alice"));
    assert_eq!(
        book.revoke("alice"),
        Err(TokenError::Unknown("alice".into()))
    );
}

#[test]
fn secrets_are_long_and_differ() {
    let (a, b) = (new_secret(), new_secret());
    assert_ne!(a, b);
    assert_eq!(a.len(), 4 + 64);
}
