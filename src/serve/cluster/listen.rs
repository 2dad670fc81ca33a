//! The instance's ear on the database: one connection of its own that
//! `LISTEN`s for turns queued, results written and cancels asked, and
//! wakes whoever waits for them. Notifications are hints: everything they
//! announce is also found by polling (claims and followers look again at
//! least every second, cancel flags are re-read on every heartbeat), so a
//! lost connection costs only latency; it is opened again.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio_postgres::{AsyncMessage, NoTls};

use super::{Cluster, ClusterError, ClusterEvent};

/// Connect once (so a bad URL fails the start), then listen in the
/// background for as long as the cluster lives.
pub(super) async fn start(cluster: Arc<Cluster>, url: &str) -> Result<(), ClusterError> {
    let config = crate::host::postgres::connection_config(url)?;
    let first = open(&config).await?;
    let weak = Arc::downgrade(&cluster);
    drop(cluster);
    tokio::spawn(listen(weak, config, first));
    Ok(())
}

type Connection = (
    tokio_postgres::Client,
    tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
);

async fn open(config: &tokio_postgres::Config) -> Result<Connection, ClusterError> {
    Ok(config.connect(NoTls).await?)
}

async fn listen(cluster: Weak<Cluster>, config: tokio_postgres::Config, first: Connection) {
    let mut next = Some(first);
    loop {
        let (client, mut connection) = match next.take() {
            Some(pair) => pair,
            None => match open(&config).await {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!("cannot listen for the queue's notifications: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if cluster.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
            },
        };
        let mut messages =
            futures_util::stream::poll_fn(move |cx| connection.poll_message(cx)).boxed();
        // The connection must be polled for the LISTEN to be answered.
        let subscribed = {
            let subscribe =
                client.batch_execute("LISTEN hb_queued; LISTEN hb_results; LISTEN hb_cancel");
            tokio::pin!(subscribe);
            loop {
                tokio::select! {
                    done = &mut subscribe => break done.map_err(ClusterError::from),
                    message = messages.next() => if message.is_none() {
                        break Err(ClusterError::Closed);
                    },
                }
            }
        };
        if let Err(e) = subscribed {
            tracing::warn!("cannot listen for the queue's notifications: {e}");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        // Whatever was announced while no one listened: look again.
        match cluster.upgrade() {
            Some(cluster) => cluster.wake_everyone(),
            None => return,
        }
        while let Some(message) = messages.next().await {
            let Some(cluster) = cluster.upgrade() else {
                return;
            };
            match message {
                Ok(AsyncMessage::Notification(note)) => match note.channel() {
                    "hb_queued" => cluster.wake_claims(),
                    "hb_results" => cluster.wake_followers(note.payload()),
                    "hb_cancel" => {
                        let _ = cluster
                            .events
                            .send(ClusterEvent::Cancel(note.payload().to_string()));
                    }
                    _ => {}
                },
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(
                        "the queue's notifications stopped: {}",
                        ClusterError::from(e)
                    );
                    break;
                }
            }
        }
        drop(client);
        if cluster.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
