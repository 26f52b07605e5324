//! Hosts made of network namespaces on one machine, for partition tests.
//!
//! A kill closes sockets: the peer gets a FIN or a RST at once. A partition
//! does not: packets vanish, and each side learns only from its own
//! timeouts. Loopback cannot show that, so a [`Lab`] gives every process
//! of a test a host of its own: a network namespace with one veth pair per
//! network it is on, whose far ends hang on a bridge in a "switch"
//! namespace. Two networks: `Front` (masters, workers, and the test itself,
//! whose end lives in the root namespace) and `Back` (masters and the
//! database). A cut takes the far end of one host's veth down; the host's
//! established connections then see only silence (their segments are
//! dropped), as after a switch port, a VPN or a security group fails.
//! Addresses are in a private range the lab makes (`10.241.N.0/24` front,
//! `10.242.N.0/24` back; `N` the first lab number free on this machine).
//!
//! Needs root (CAP_NET_ADMIN and `ip netns`): without it a test skips,
//! saying so, unless CI is set (`CI`, or `TUNEFLEET_REQUIRE_NETNS=1`), where
//! it fails. Everything the lab made is deleted when it is dropped; drop
//! the processes first (declare the lab before them).

use std::ffi::OsStr;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The two networks of a lab.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Net {
    /// Masters, workers and the test process.
    Front,
    /// Masters and the database.
    Back,
}

impl Net {
    fn suffix(self) -> &'static str {
        match self {
            Net::Front => "f",
            Net::Back => "b",
        }
    }

    fn octet(self) -> u8 {
        match self {
            Net::Front => 241,
            Net::Back => 242,
        }
    }
}

/// One host: a namespace and its addresses.
#[derive(Clone, Debug)]
pub struct Host {
    pub name: String,
    ns: String,
    index: u8,
    nets: Vec<Net>,
    lab: u8,
}

impl Host {
    /// This host's address on `net` (it must be on it).
    pub fn ip(&self, net: Net) -> Ipv4Addr {
        assert!(self.nets.contains(&net), "{} is not on {net:?}", self.name);
        Ipv4Addr::new(10, net.octet(), self.lab, self.index)
    }

    /// `ip:port` on the front network.
    pub fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::from((self.ip(Net::Front), port))
    }

    /// A command run on this host (`ip netns exec`).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.ns]).arg(program);
        command
    }
}

/// A set of hosts on two networks; see the module docs.
pub struct Lab {
    id: u8,
    hosts: Vec<Host>,
}

fn required() -> bool {
    let set =
        |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    set("CI") || set("TUNEFLEET_REQUIRE_NETNS")
}

/// Runs `ip ARGS`; the error says which command failed and why.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip` (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}`: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Lab {
    /// A new lab, or `None` (the test skips, saying why) where namespaces
    /// cannot be made; under CI that is a failure.
    pub fn new_or_skip(test: &str) -> Option<Lab> {
        match Lab::new() {
            Ok(lab) => Some(lab),
            Err(why) if required() => {
                panic!("{test}: cannot make network namespaces ({why}); CI is set, so this fails")
            }
            Err(why) => {
                eprintln!("skipped {test}: cannot make network namespaces ({why}); run as root");
                None
            }
        }
    }

    fn new() -> Result<Lab, String> {
        // The first lab number whose switch namespace can be made: a
        // namespace name is taken atomically, so two labs never share one.
        // A lab just dropped may still hold its number's root-side link
        // for a moment (namespaces are torn down in the background): the
        // next number is taken then.
        let mut last = String::new();
        for id in 1..=250u8 {
            let wired =
                ip(&["netns", "add", &format!("tf{id}-sw")]).and_then(|()| Lab::wire_switch(id));
            match wired {
                Ok(lab) => return Ok(lab),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn wire_switch(id: u8) -> Result<Lab, String> {
        let lab = Lab {
            id,
            hosts: Vec::new(),
        };
        let sw = lab.switch();
        ip(&["-n", &sw, "link", "set", "dev", "lo", "up"])?;
        for net in [Net::Front, Net::Back] {
            let bridge = format!("br{}", net.suffix());
            ip(&["-n", &sw, "link", "add", &bridge, "type", "bridge"])?;
            ip(&["-n", &sw, "link", "set", "dev", &bridge, "up"])?;
        }
        // The test process's own end of the front network.
        let root = format!("tf{id}t");
        ip(&[
            "link", "add", &root, "type", "veth", "peer", "name", "t", "netns", &sw,
        ])?;
        ip(&["-n", &sw, "link", "set", "dev", "t", "master", "brf", "up"])?;
        let cidr = format!("10.241.{id}.1/24");
        ip(&["addr", "add", &cidr, "dev", &root])?;
        ip(&["link", "set", "dev", &root, "up"])?;
        Ok(lab)
    }

    fn switch(&self) -> String {
        format!("tf{}-sw", self.id)
    }

    /// A new host on `nets`; `index` (2 to 254) is its last address byte.
    pub fn host(&mut self, name: &str, index: u8, nets: &[Net]) -> Host {
        let host = Host {
            name: name.to_string(),
            ns: format!("tf{}-{name}", self.id),
            index,
            nets: nets.to_vec(),
            lab: self.id,
        };
        self.wire_host(&host)
            .unwrap_or_else(|e| panic!("cannot make host {name}: {e}"));
        self.hosts.push(host.clone());
        host
    }

    fn wire_host(&self, host: &Host) -> Result<(), String> {
        let (ns, sw) = (host.ns.as_str(), self.switch());
        ip(&["netns", "add", ns])?;
        ip(&["-n", ns, "link", "set", "dev", "lo", "up"])?;
        for net in &host.nets {
            let (inner, outer) = (format!("eth{}", net.suffix()), self.port(host, *net));
            ip(&[
                "-n", ns, "link", "add", &inner, "type", "veth", "peer", "name", &outer, "netns",
                &sw,
            ])?;
            let cidr = format!("{}/24", host.ip(*net));
            ip(&["-n", ns, "addr", "add", &cidr, "dev", &inner])?;
            ip(&["-n", ns, "link", "set", "dev", &inner, "up"])?;
            let bridge = format!("br{}", net.suffix());
            ip(&[
                "-n", &sw, "link", "set", "dev", &outer, "master", &bridge, "up",
            ])?;
        }
        Ok(())
    }

    /// The switch's end of `host`'s link to `net`.
    fn port(&self, host: &Host, net: Net) -> String {
        format!("{}{}", host.name, net.suffix())
    }

    /// Cuts `host` off `net`, in silence (see the module docs).
    pub fn cut(&self, host: &Host, net: Net) {
        let port = self.port(host, net);
        ip(&["-n", &self.switch(), "link", "set", "dev", &port, "down"])
            .unwrap_or_else(|e| panic!("cut {}: {e}", host.name));
    }

    /// Puts `host` back on `net`.
    pub fn heal(&self, host: &Host, net: Net) {
        let port = self.port(host, net);
        ip(&["-n", &self.switch(), "link", "set", "dev", &port, "up"])
            .unwrap_or_else(|e| panic!("heal {}: {e}", host.name));
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Deleting a namespace deletes its ends of the veth pairs, and with
        // them the peers, but in the background: the root namespace's end,
        // whose name the next lab may want, goes at once.
        let _ = ip(&["link", "del", "dev", &format!("tf{}t", self.id)]);
        for host in &self.hosts {
            let _ = ip(&["netns", "del", &host.ns]);
        }
        let _ = ip(&["netns", "del", &self.switch()]);
    }
}

/// A process on a lab host, its output in a log file; killed when dropped.
pub struct LabProcess {
    child: Option<Child>,
    pub log: PathBuf,
}

impl LabProcess {
    /// Starts `command` with RUST_LOG=info, stdout and stderr to `log`.
    pub fn spawn(mut command: Command, log: &Path) -> LabProcess {
        let file = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .expect("log file")
        };
        let child = command
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file())
            .stderr(file())
            .spawn()
            .expect("spawn a process on a lab host");
        LabProcess {
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for LabProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A PostgreSQL server of its own on a lab host (Debian's, as
/// `scripts/start-postgres.sh` uses), listening on the host's back address.
pub struct LabPostgres {
    host: Host,
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub url: String,
}

impl LabPostgres {
    /// `None` (the test skips, saying so) without PostgreSQL's binaries,
    /// unless CI is set.
    pub fn start_or_skip(host: &Host, test: &str) -> Option<LabPostgres> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|dirs| {
                let mut found: Vec<PathBuf> = dirs
                    .filter_map(|d| d.ok().map(|d| d.path().join("bin")))
                    .filter(|b| b.join("pg_ctl").is_file())
                    .collect();
                found.sort();
                found.pop()
            });
        let Some(bin) = bin else {
            let why =
                "no PostgreSQL under /usr/lib/postgresql (scripts/start-postgres.sh installs it)";
            assert!(!required(), "{test}: {why}; CI is set, so this fails");
            eprintln!("skipped {test}: {why}");
            return None;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let as_postgres = |script: String| {
            let status = host
                .command("su")
                .args(["postgres", "-s", "/bin/sh", "-c", &script])
                .stdout(Stdio::null())
                .status()
                .expect("run su postgres");
            assert!(status.success(), "as postgres: {script}");
        };
        let status = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(status.success(), "chown the data directory");
        let (pg, data) = (bin.display(), dir.path().display());
        as_postgres(format!(
            "'{pg}/initdb' -D '{data}' -A trust -U postgres --no-sync"
        ));
        let listen = host.ip(Net::Back);
        // The lab's back network may connect, as loopback may.
        let hba = dir.path().join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba).expect("pg_hba.conf");
        rules.push_str(&format!(
            "host all all {}/24 trust\n",
            Ipv4Addr::from(u32::from(listen) & !0xff)
        ));
        std::fs::write(&hba, rules).expect("write pg_hba.conf");
        as_postgres(format!(
            "'{pg}/pg_ctl' -D '{data}' -l '{data}/server.log' -w -t 30 -o \
             \"-p 5432 -k '{data}' -c listen_addresses={listen} -c fsync=off\" start"
        ));
        Some(LabPostgres {
            host: host.clone(),
            bin,
            url: format!("postgres://postgres@{listen}:5432/postgres"),
            dir,
        })
    }
}

impl Drop for LabPostgres {
    fn drop(&mut self) {
        let script = format!(
            "'{}/pg_ctl' -D '{}' stop -m immediate",
            self.bin.display(),
            self.dir.path().display()
        );
        let _ = self
            .host
            .command("su")
            .args(["postgres", "-s", "/bin/sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// An HTTP GET with deadlines (a cut host must not hang the test): the
/// status code, or `None` when nothing answered within `timeout`.
pub fn http_status(addr: SocketAddr, path: &str, timeout: Duration) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Polls `f` every 50 ms until it is `Some` or `timeout` passes (`None`).
pub fn within<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
