//! The fake's listener, which can be taken down: while down, connections
//! are closed as they are accepted and open ones fail on their next read or
//! write, as a client sees kube-apiserver restarting or unreachable.
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

pub struct Gated {
    pub inner: TcpListener,
    pub down: Arc<AtomicBool>,
}

impl axum::serve::Listener for Gated {
    type Io = Cut;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Cut, std::net::SocketAddr) {
        loop {
            let Ok((stream, addr)) = self.inner.accept().await else {
                continue;
            };
            if self.down.load(Ordering::SeqCst) {
                drop(stream);
                continue;
            }
            let stream = Cut {
                inner: stream,
                down: self.down.clone(),
            };
            return (stream, addr);
        }
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection that fails once the server is down.
pub struct Cut {
    inner: TcpStream,
    down: Arc<AtomicBool>,
}

impl Cut {
    fn check(&self) -> io::Result<()> {
        if self.down.load(Ordering::SeqCst) {
            Err(io::Error::from(io::ErrorKind::ConnectionReset))
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for Cut {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Cut {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
