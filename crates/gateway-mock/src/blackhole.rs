//! [`Blackhole`]: a listener that accepts connections and never reads or answers them.

use std::net::SocketAddr;

/// Accepts every connection and holds it open, silent, until dropped (then closes them all).
pub struct Blackhole {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Blackhole {
    /// Listens on a free port of 127.0.0.1.
    pub async fn start() -> std::io::Result<Blackhole> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        Ok(Blackhole { addr, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its root URL: `http://127.0.0.1:<port>`.
    pub fn root(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A provider's base URL on it: `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.root())
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.task.abort();
    }
}
