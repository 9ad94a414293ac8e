//! A TCP proxy between the agents and the real API server that breaks the
//! network on demand, as networks break: a black hole (nothing crosses,
//! nothing is closed, then it heals), a reset of every connection (RST),
//! and half-open connections (every connection open now goes silent for
//! good, without a FIN or an RST, as behind a load balancer that lost
//! its state; new connections work). TLS passes through untouched: the
//! agents still check the API server's certificate.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What happens to the bytes crossing the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Pass,
    BlackHole,
}

/// What becomes of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Live,
    Reset,
    Abandoned,
}

pub struct FaultProxy {
    pub addr: SocketAddr,
    flow: watch::Sender<Flow>,
    connections: Arc<Mutex<Vec<watch::Sender<Fate>>>>,
    stop: CancellationToken,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FaultProxy {
    /// A proxy on a loopback port to `upstream`.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let (flow, _) = watch::channel(Flow::Pass);
        let connections: Arc<Mutex<Vec<watch::Sender<Fate>>>> = Arc::default();
        let stop = CancellationToken::new();
        let (f, conns, s) = (flow.clone(), connections.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let client = tokio::select! {
                    r = listener.accept() => match r {
                        Ok((client, _)) => client,
                        Err(_) => continue,
                    },
                    _ = s.cancelled() => return,
                };
                let (fate, fate_rx) = watch::channel(Fate::Live);
                {
                    let mut all = conns.lock().unwrap();
                    all.retain(|c| !c.is_closed());
                    all.push(fate);
                }
                tokio::spawn(serve(client, upstream, f.subscribe(), fate_rx, s.clone()));
            }
        });
        FaultProxy {
            addr,
            flow,
            connections,
            stop,
        }
    }

    /// Nothing crosses until [`FaultProxy::heal`]; connections stay open
    /// and new ones are accepted and held.
    pub fn black_hole(&self) {
        self.flow.send_replace(Flow::BlackHole);
    }

    /// Bytes cross again, on the connections held as well.
    pub fn heal(&self) {
        self.flow.send_replace(Flow::Pass);
    }

    /// Every open connection ends with an RST.
    pub fn reset_all(&self) {
        self.doom(Fate::Reset);
    }

    /// How many client connections are open through the proxy.
    pub fn open(&self) -> usize {
        let mut all = self.connections.lock().unwrap();
        all.retain(|c| !c.is_closed());
        all.len()
    }

    /// Every open connection goes silent for good: what its client sends
    /// is read and dropped, nothing comes back, and it is never closed.
    pub fn abandon_all(&self) {
        self.doom(Fate::Abandoned);
    }

    fn doom(&self, fate: Fate) {
        let mut all = self.connections.lock().unwrap();
        for c in all.iter() {
            c.send_replace(fate);
        }
        all.clear();
    }
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut flow: watch::Receiver<Flow>,
    mut fate: watch::Receiver<Fate>,
    stop: CancellationToken,
) {
    // A connection made while the network is away waits for it.
    if flow.wait_for(|f| *f == Flow::Pass).await.is_err() {
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return; // the client sees its connection closed, as with a refusal
    };
    let ended = {
        let (cr, cw) = client.split();
        let (sr, sw) = server.split();
        tokio::select! {
            _ = async { tokio::join!(pump(cr, sw, flow.clone()), pump(sr, cw, flow.clone())) } => Fate::Live,
            f = fate.wait_for(|f| *f != Fate::Live) => f.map(|f| *f).unwrap_or(Fate::Live),
            _ = stop.cancelled() => Fate::Live,
        }
    };
    drop(server);
    match ended {
        Fate::Live => {}
        Fate::Reset => {
            let _ = client.set_zero_linger();
            drop(client);
        }
        Fate::Abandoned => {
            let mut sink = [0u8; 16 * 1024];
            loop {
                tokio::select! {
                    r = client.read(&mut sink) => if matches!(r, Ok(0) | Err(_)) { return },
                    _ = stop.cancelled() => return,
                }
            }
        }
    }
}

/// Copies `from` to `to`, holding what it read while the network is a
/// black hole.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut flow: watch::Receiver<Flow>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        if flow.wait_for(|f| *f == Flow::Pass).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
