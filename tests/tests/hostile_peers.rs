//! Hostile peers against a real master: half-open TCP connections,
//! slow-loris upgrades, a subscriber that never reads, and a frame that
//! declares a huge length and stops. Each is bounded in time (the master
//! closes it) or in memory (it cannot make the master buffer without limit),
//! and the fleet keeps dispatching meanwhile: a sim worker finishes its jobs
//! while the attack goes on.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;
use tunefleet_server::client::Client;
use tunefleet_tests::raw::{connect, next_of_type, send};
use tunefleet_tests::*;

/// Whether the master has closed `stream` (read gives EOF or an error).
fn closed_by_master(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout");
    let mut byte = [0u8; 256];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

async fn all_done(master: &Master, n: usize, within: Duration) {
    eventually(within, &format!("{n} jobs done"), || async {
        let mut c = Client::connect(&master.url(), Some(ADMIN_TOKEN))
            .await
            .ok()?;
        let s = c.status().await.ok()?;
        (s.jobs.done == n).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_and_slow_loris_connections_are_closed_while_jobs_go_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let mut idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(master.addr).expect("connect"))
        .collect();
    let mut loris: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(master.addr).expect("connect"))
        .collect();
    let head =
        b"GET /ws/client HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n";

    let mut client = master.client().await;
    client
        .submit(matmul_yaml(40, "loris"), Some("loris.yaml"))
        .await
        .expect("submit");
    let _worker = Worker::start(&master, "steady", 0.05, &[]);

    let started = Instant::now();
    let mut step = 0;
    let mut closed_at = None;
    while started.elapsed() < Duration::from_secs(30) {
        // One byte per connection every 200 ms: never a complete head.
        for s in &mut loris {
            let _ = s.write_all(&head[step % head.len()..step % head.len() + 1]);
        }
        step += 1;
        std::thread::sleep(Duration::from_millis(200));
        let all_closed =
            idle.iter_mut().all(closed_by_master) && loris.iter_mut().all(closed_by_master);
        if all_closed {
            closed_at = Some(started.elapsed());
            break;
        }
    }
    let closed_at = closed_at.expect("every idle and slow-loris connection closed within 30 s");
    eprintln!("300 half-open + 20 slow-loris connections closed after {closed_at:?}");
    assert!(
        closed_at >= Duration::from_secs(9),
        "not before the 10 s limit: {closed_at:?}"
    );
    all_done(&master, 40, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_does_not_hold_up_the_fleet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let mut stuck = connect(&format!("{}/ws/client", master.url())).await;
    send(
        &mut stuck,
        json!({"id": 1, "type": "hello", "protocol": 1, "token": ADMIN_TOKEN}),
    )
    .await;
    next_of_type(&mut stuck, "reply").await;
    send(&mut stuck, json!({"id": 2, "type": "subscribe"})).await;
    // From here on it never reads.
    let mut client = master.client().await;
    let n = 600;
    client
        .submit(matmul_yaml(n, "unread"), Some("unread.yaml"))
        .await
        .expect("submit");
    let _w1 = Worker::start(&master, "u1", 0.0, &[]);
    let _w2 = Worker::start(&master, "u2", 0.0, &[]);
    let t = Instant::now();
    all_done(&master, n, Duration::from_secs(60)).await;
    eprintln!(
        "{n} jobs done in {:?} with a subscriber that never reads",
        t.elapsed()
    );
    drop(stuck);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_declaring_a_huge_length_is_refused_at_its_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let mut tcp = TcpStream::connect(master.addr).expect("connect");
    write!(
        tcp,
        "GET /ws/client HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        master.addr
    )
    .expect("upgrade");
    let mut response = [0u8; 1024];
    let n = tcp.read(&mut response).expect("101");
    assert!(String::from_utf8_lossy(&response[..n]).starts_with("HTTP/1.1 101"));
    // A masked text frame claiming 2^62 bytes, then nothing.
    let mut frame = vec![0x81, 0xFF];
    frame.extend_from_slice(&(1u64 << 62).to_be_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4]);
    let t = Instant::now();
    tcp.write_all(&frame).expect("header");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut rest = Vec::new();
    let _ = tcp.read_to_end(&mut rest);
    let elapsed = t.elapsed();
    // A close frame with 1009 (message too big), then the end of the stream.
    assert!(
        rest.windows(2).any(|w| w == [0x03, 0xF1]),
        "close 1009 expected, got {rest:?}"
    );
    assert!(
        elapsed < Duration::from_secs(5),
        "closed at once: {elapsed:?}"
    );
    // And the master is fine.
    let mut client = master.client().await;
    client.status().await.expect("still serving");
}
