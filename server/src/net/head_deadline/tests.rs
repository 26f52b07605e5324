use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_silent_peer_times_out_and_a_complete_head_disarms() {
    let (client, server) = tokio::io::duplex(1024);
    let mut io = HeadDeadlineIo::new(server, Duration::from_millis(200));
    let mut buf = [0u8; 64];
    let err = io.read(&mut buf).await.expect_err("times out");
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    drop(client);

    let (mut client, server) = tokio::io::duplex(1024);
    let mut io = HeadDeadlineIo::new(server, Duration::from_millis(200));
    // Split across reads, with a false start (\r\n\r then x).
    client
        .write_all(b"GET / HTTP/1.1\r\nA: b\r\n\rx")
        .await
        .unwrap();
    let _ = io.read(&mut buf).await.unwrap();
    client.write_all(b"\r\n\r").await.unwrap();
    let _ = io.read(&mut buf).await.unwrap();
    assert!(io.deadline.is_some(), "not yet complete");
    client.write_all(b"\n").await.unwrap();
    let _ = io.read(&mut buf).await.unwrap();
    assert!(io.deadline.is_none(), "head complete: no deadline");
    tokio::time::sleep(Duration::from_millis(400)).await;
    client.write_all(b"later").await.unwrap();
    let n = io.read(&mut buf).await.expect("no deadline any more");
    assert_eq!(&buf[..n], b"later");
}
