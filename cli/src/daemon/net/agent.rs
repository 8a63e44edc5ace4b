//! HAProxy's agent check (`agent-check` on a server line, `fleet.agent-listen` here): each
//! connection is answered with one line and closed. `ready up` while the node takes new
//! sessions; `drain` while it drains, which HAProxy turns into "no new sessions, but the
//! sessions stuck to this node keep coming", the drain's own rule.

use super::super::Daemon;
use super::NetworkError;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// The agent's answer for a node that is (`true`) or is not draining.
pub(super) fn state_line(draining: bool) -> &'static str {
    if draining {
        "drain\n"
    } else {
        "ready up\n"
    }
}

/// Binds every agent address and answers on them until the daemon stops.
pub(super) async fn start(
    daemon: &Arc<Daemon>,
    addresses: &[SocketAddr],
) -> Result<(), NetworkError> {
    for address in addresses {
        let listener = super::bind(address).await?;
        tracing::info!("HAProxy agent check on tcp://{address}");
        let daemon = Arc::clone(daemon);
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                let line = state_line(daemon.cv.is_draining());
                tokio::spawn(async move {
                    let _ = stream.write_all(line.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_draining_node_asks_for_drain_and_a_serving_one_for_ready() {
        assert_eq!(super::state_line(true), "drain\n");
        assert_eq!(super::state_line(false), "ready up\n");
    }
}
