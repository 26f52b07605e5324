//! TLS for the master (`serve --tls-cert PEM --tls-key PEM`): rustls with the
//! ring provider, HTTP/1.1 only (WebSockets upgrade over HTTP/1.1).
//!
//! [`TlsListener`] plugs into `axum::serve` like a `TcpListener`: a background
//! task accepts TCP connections (TCP_NODELAY on) and runs each TLS handshake in
//! its own task with a time limit, so a peer that opens a socket and says
//! nothing delays nobody else. Handshakes in flight are bounded; a failed
//! handshake (an untrusted certificate on the peer's side, plain HTTP on a TLS
//! port) is logged at debug level and dropped.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

/// Limit for a TLS handshake after the TCP connection is accepted.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Loads a certificate chain and its private key (PEM files) into a server
/// configuration. Errors name the file and what is wrong with it.
pub fn server_config(cert: &Path, key: &Path) -> anyhow::Result<Arc<ServerConfig>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read TLS certificate {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("invalid PEM in TLS certificate {}", cert.display()))?;
    if certs.is_empty() {
        bail!(
            "no certificate (-----BEGIN CERTIFICATE-----) in {}",
            cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        anyhow::anyhow!(
            "cannot read a private key (PKCS#8, PKCS#1 or SEC1 PEM) from {}: {e}",
            key.display()
        )
    })?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .context("the TLS certificate and key do not fit together")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A listener that yields TLS streams; see the module docs.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
    acceptor: JoinHandle<()>,
}

impl TlsListener {
    /// Wraps `listener`; at most `max_handshakes` handshakes run at once (more
    /// connections wait in the kernel's accept queue).
    pub fn new(
        listener: TcpListener,
        config: Arc<ServerConfig>,
        max_handshakes: usize,
    ) -> io::Result<Self> {
        let local_addr = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let tls = TlsAcceptor::from(config);
        let slots = Arc::new(Semaphore::new(max_handshakes.max(1)));
        let acceptor = tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (tcp, addr) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: back off a little.
                        warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if let Err(e) = tcp.set_nodelay(true) {
                    warn!("cannot set TCP_NODELAY: {e}");
                }
                let (tls, ready) = (tls.clone(), tx.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = ready.send((stream, addr)).await;
                        }
                        Ok(Err(e)) => debug!(%addr, "TLS handshake failed: {e}"),
                        Err(_) => debug!(%addr, "TLS handshake timed out"),
                    }
                });
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(TlsListener {
            ready,
            local_addr,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept task ended (it never does while we hold the receiver).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}
