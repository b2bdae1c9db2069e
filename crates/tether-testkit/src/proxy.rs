//! A TCP proxy in front of a server, whose open connections a test cuts at once (a
//! network that drops them, or a load balancer that restarts), which a test takes
//! down for a while (new connections closed at once) and up again, or silences (a
//! partition: every connection, open or new, passes nothing until it is up again,
//! then is closed, as a flow table that dropped it). It runs on a thread of its own, so that a test that blocks (waiting for
//! a process, running kubectl) never stalls the traffic through it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::AbortHandle;

pub struct CutProxy {
    port: u16,
    open: Arc<Mutex<Vec<AbortHandle>>>,
    down: Arc<AtomicBool>,
    silent: Arc<watch::Sender<bool>>,
    /// Ends the proxy's thread (and every connection) when dropped.
    _stop: oneshot::Sender<()>,
}

impl CutProxy {
    /// A proxy on a free port of 127.0.0.1 to `upstream`.
    pub fn start(upstream: SocketAddr) -> CutProxy {
        let std_listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("a port for the proxy");
        std_listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let port = std_listener
            .local_addr()
            .expect("the proxy's address")
            .port();
        let open: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (stop, stopped) = oneshot::channel::<()>();
        let connections = open.clone();
        let down: Arc<AtomicBool> = Arc::default();
        let refusing = down.clone();
        let silent = Arc::new(watch::Sender::new(false));
        let partition = silent.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the proxy's runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(std_listener).expect("the proxy's listener");
                let accepting = async {
                    while let Ok((mut client, _)) = listener.accept().await {
                        if refusing.load(Ordering::Acquire) {
                            continue;
                        }
                        let mut silent = partition.subscribe();
                        let task = tokio::spawn(async move {
                            let silenced = *silent.borrow();
                            if silenced {
                                // Held (nothing passes), then closed.
                                let _ = silent.wait_for(|s| !*s).await;
                                return;
                            }
                            if let Ok(mut server) = TcpStream::connect(upstream).await {
                                let silenced = tokio::select! {
                                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
                                    partition = silent.wait_for(|s| *s) => partition.is_ok(),
                                };
                                if silenced {
                                    let _ = silent.wait_for(|s| !*s).await;
                                }
                            }
                        });
                        let mut open = connections.lock().unwrap_or_else(PoisonError::into_inner);
                        open.retain(|t| !t.is_finished());
                        open.push(task.abort_handle());
                    }
                };
                tokio::select! {
                    () = accepting => {}
                    _ = stopped => {}
                }
            });
        });
        CutProxy {
            port,
            open,
            down,
            silent,
            _stop: stop,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Cuts every connection and closes new ones at once until [`CutProxy::up`]; says
    /// how many were open.
    pub fn down(&self) -> usize {
        self.down.store(true, Ordering::Release);
        self.cut()
    }

    /// Lets connections through again (those held while silent are closed).
    pub fn up(&self) {
        self.down.store(false, Ordering::Release);
        self.silent.send_replace(false);
    }

    /// A partition until [`CutProxy::up`]: no byte passes on any connection, open or
    /// new, and none is closed.
    pub fn silence(&self) {
        self.silent.send_replace(true);
    }

    /// Cuts every connection open now (both of its sockets are closed); says how many
    /// were.
    pub fn cut(&self) -> usize {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let cut = open.iter().filter(|t| !t.is_finished()).count();
        for task in open.drain(..) {
            task.abort();
        }
        cut
    }
}
