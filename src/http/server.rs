//! The listener loop: HTTP/1.1 connections served by hyper with limits axum's default server
//! does not set — a deadline for a request's headers to arrive (a slowloris client is cut off)
//! and a bound on their size — and a graceful shutdown that stops accepting, lets every request
//! in flight finish, then returns. Each request carries its peer's address (`ConnectInfo`).

use std::future::Future;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::service::{service_fn, Service as _};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// The most header bytes one request may send (hyper answers 431 beyond it).
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Serves `router` on `listener` until `shutdown`, giving each request `read_timeout` to send
/// its headers.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .max_buf_size(MAX_HEADER_BYTES);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                // Each request carries its peer's address, as axum's `ConnectInfo`.
                let routed = TowerToHyperService::new(router.clone());
                let service = service_fn(move |mut request: Request<Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    routed.call(request)
                });
                let connection = builder.serve_connection(TokioIo::new(stream), service);
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    let _ = connection.await;
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    graceful.shutdown().await;
}
