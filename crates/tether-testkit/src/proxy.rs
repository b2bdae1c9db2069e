//! A TCP proxy in front of a server, whose open connections a test cuts at once (a
//! network that drops them, or a load balancer that restarts), and which a test takes
//! down for a while (new connections closed at once) and up again. It runs on a thread of its own, so that a test that blocks (waiting for
//! a process, running kubectl) never stalls the traffic through it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

pub struct CutProxy {
    port: u16,
    open: Arc<Mutex<Vec<AbortHandle>>>,
    down: Arc<AtomicBool>,
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
                        let task = tokio::spawn(async move {
                            if let Ok(mut server) = TcpStream::connect(upstream).await {
                                let _ =
                                    tokio::io::copy_bidirectional(&mut client, &mut server).await;
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

    /// Lets connections through again.
    pub fn up(&self) {
        self.down.store(false, Ordering::Release);
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
