//! News between the nodes of one database, by PostgreSQL's LISTEN/NOTIFY on a connection of
//! its own: a node with requests waiting for a claim another node holds asks that node, and the
//! holder says when the claim's answer is durable. Notifications are sent as statements of their
//! own, never inside the group commit's transaction (a NOTIFY there would serialise every
//! commit), and only for claims that have remote waiters, so the hot path sends none. A
//! notification is a hint: the waiting node reads the claim from the database before it
//! answers, and a hint lost while the connection is down leaves its waiters to their deadline.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::store::{ClaimId, ClaimNews};

/// The channel the nodes talk on.
const CHANNEL: &str = "idem_claims";

/// How long the listener waits before connecting again after its connection failed.
const RECONNECT: Duration = Duration::from_secs(1);

/// How long the listening connection may be idle before TCP probes whether it still lives.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);

/// One node's end of the channel.
pub(super) struct News {
    /// The listening connection's client while it is up: notifications are sent on it.
    client: Mutex<Option<Arc<Client>>>,
    /// What the other nodes said, until the engine takes it.
    heard: Mutex<Option<mpsc::UnboundedReceiver<ClaimNews>>>,
}

impl News {
    /// Connects with `config` and listens, connecting again whenever the connection fails,
    /// for as long as the returned handle lives.
    pub(super) fn start(mut config: tokio_postgres::Config) -> Arc<News> {
        // A connection that died without a word is noticed within a minute, not hours.
        config.keepalives_idle(KEEPALIVE_IDLE);
        let (tx, rx) = mpsc::unbounded_channel();
        let news = Arc::new(News {
            client: Mutex::new(None),
            heard: Mutex::new(Some(rx)),
        });
        tokio::spawn(listen(config, Arc::downgrade(&news), tx));
        news
    }

    /// Tells the nodes that `holder`'s claim `id` has requests waiting on this node.
    pub(super) fn ask(&self, id: &ClaimId, holder: u64) {
        self.send(format!(
            "a {holder:x} {} {}",
            idem_schemas::lower_hex(&id.digest),
            id.tenant
        ));
    }

    /// Tells the nodes that the claim `id` has a durable answer.
    pub(super) fn answered(&self, id: &ClaimId) {
        self.send(format!(
            "d {} {}",
            idem_schemas::lower_hex(&id.digest),
            id.tenant
        ));
    }

    /// What the other nodes say, once.
    pub(super) fn take(&self) -> Option<mpsc::UnboundedReceiver<ClaimNews>> {
        self.heard.lock().ok().and_then(|mut heard| heard.take())
    }

    fn send(&self, payload: String) {
        let client = self.client.lock().ok().and_then(|c| c.clone());
        let Some(client) = client else {
            return;
        };
        tokio::spawn(async move {
            if let Err(e) = client
                .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
                .await
            {
                tracing::debug!(error = %e, "cannot notify the other nodes");
            }
        });
    }
}

/// A notification's payload as news; `None` for one this idem does not know.
fn parse(payload: &str) -> Option<ClaimNews> {
    let mut words = payload.split(' ');
    let kind = words.next()?;
    let holder = match kind {
        "a" => Some(u64::from_str_radix(words.next()?, 16).ok()?),
        "d" => None,
        _ => return None,
    };
    let digest = idem_schemas::hex::decode(words.next()?)?.try_into().ok()?;
    let tenant = words.next()?.to_string();
    let id = ClaimId { tenant, digest };
    Some(match holder {
        Some(holder) => ClaimNews::Asked { id, holder },
        None => ClaimNews::Answered { id },
    })
}

/// The listener: connects, listens, hands on what it hears; again after a failure.
async fn listen(
    config: tokio_postgres::Config,
    news: Weak<News>,
    tx: mpsc::UnboundedSender<ClaimNews>,
) {
    loop {
        if news.strong_count() == 0 {
            return;
        }
        match config.connect(NoTls).await {
            Ok((client, mut connection)) => {
                let heard = tx.clone();
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(Ok(message)) = messages.next().await {
                        if let AsyncMessage::Notification(n) = message {
                            if let Some(said) = parse(n.payload()) {
                                let _ = heard.send(said);
                            }
                        }
                    }
                });
                let client = Arc::new(client);
                match client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                    Ok(()) => match news.upgrade() {
                        Some(news) => {
                            if let Ok(mut slot) = news.client.lock() {
                                *slot = Some(client);
                            }
                        }
                        None => return,
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot listen for the other nodes");
                        // The connection ends once its last client is gone.
                        drop(client);
                    }
                }
                let _ = driver.await;
                if let Some(news) = news.upgrade() {
                    if let Ok(mut slot) = news.client.lock() {
                        *slot = None;
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot connect to hear the other nodes"),
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_read_back_as_news() {
        let id = ClaimId {
            tenant: "acme-1".into(),
            digest: [0xab; 32],
        };
        let asked = format!("a {:x} {} acme-1", 0x1234u64, "ab".repeat(32));
        assert_eq!(
            parse(&asked),
            Some(ClaimNews::Asked {
                id: id.clone(),
                holder: 0x1234
            })
        );
        let answered = format!("d {} acme-1", "ab".repeat(32));
        assert_eq!(parse(&answered), Some(ClaimNews::Answered { id }));
        assert_eq!(parse("x 1 2"), None);
        assert_eq!(parse("d abcd acme"), None, "a digest is 32 bytes");
    }
}
