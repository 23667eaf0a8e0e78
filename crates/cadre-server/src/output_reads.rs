//! Reads of a task's output from the agent of its node ([`ControllerMessage::ReadOutput`]):
//! each connected agent of protocol [`READ_OUTPUT_VERSION`] or later can be asked, and its
//! answer ([`AgentMessage::OutputRead`]) goes back to the one request that asked, and only
//! if it comes from the node that was asked.
//!
//! Not through the engine: a read changes nothing the controller decides, and the answer
//! comes from an agent at its own pace.
//!
//! [`AgentMessage::OutputRead`]: cadre_proto::agent::AgentMessage::OutputRead

use cadre_proto::agent::{ControllerMessage, OutputReadAnswer, OutputRequest, READ_OUTPUT_VERSION};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

/// How long a read waits for its agent.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads waiting at most at once (each holds a small entry until answered or timed out).
pub const MAX_WAITING: usize = 10_000;

/// Reads waiting for one node's agent at most: one node that does not answer does not
/// make every other node's reads busy.
pub const MAX_WAITING_PER_NODE: usize = 64;

/// Why a read got no answer from its agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadFailure {
    #[error("the agent of node `{node}` is not connected")]
    NotConnected { node: String },
    #[error(
        "the agent of node `{node}` is too old to read output (protocol {version}; reading needs {READ_OUTPUT_VERSION})"
    )]
    TooOld { node: String, version: u32 },
    #[error("the agent of node `{node}` did not answer within {} s", READ_TIMEOUT.as_secs())]
    TimedOut { node: String },
    #[error("too many reads of output are waiting for their agents; try again")]
    Busy,
}

/// The agents that can be asked, and the reads waiting for an answer.
#[derive(Clone, Default)]
pub struct OutputReads(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    /// Each node's connection: its number, its protocol version, its outgoing messages.
    links: HashMap<String, Link>,
    waiting: HashMap<u64, (String, oneshot::Sender<OutputReadAnswer>)>,
    next: u64,
}

struct Link {
    conn: u64,
    version: u32,
    tx: UnboundedSender<ControllerMessage>,
}

impl OutputReads {
    /// Node `node`'s agent is on connection `conn` now, speaking `version`.
    pub fn link(
        &self,
        node: &str,
        conn: u64,
        version: u32,
        tx: UnboundedSender<ControllerMessage>,
    ) {
        if let Ok(mut inner) = self.0.lock() {
            inner
                .links
                .insert(node.to_owned(), Link { conn, version, tx });
        }
    }

    /// Connection `conn` of node `node` closed (a newer connection of the node stays).
    pub fn unlink(&self, node: &str, conn: u64) {
        if let Ok(mut inner) = self.0.lock()
            && inner.links.get(node).is_some_and(|l| l.conn == conn)
        {
            inner.links.remove(node);
        }
    }

    /// Asks the agent of `node` for a piece of a task's output and waits for its answer.
    pub async fn read(
        &self,
        node: &str,
        read: OutputRequest,
    ) -> Result<OutputReadAnswer, ReadFailure> {
        let (id, rx) = {
            let Ok(mut inner) = self.0.lock() else {
                return Err(ReadFailure::NotConnected {
                    node: node.to_owned(),
                });
            };
            if inner.waiting.len() >= MAX_WAITING
                || inner.waiting.values().filter(|(n, _)| n == node).count() >= MAX_WAITING_PER_NODE
            {
                return Err(ReadFailure::Busy);
            }
            let (tx, version) = match inner.links.get(node) {
                None => {
                    return Err(ReadFailure::NotConnected {
                        node: node.to_owned(),
                    });
                }
                Some(l) => (l.tx.clone(), l.version),
            };
            if version < READ_OUTPUT_VERSION {
                return Err(ReadFailure::TooOld {
                    node: node.to_owned(),
                    version,
                });
            }
            inner.next += 1;
            let id = inner.next;
            let (answer_tx, answer_rx) = oneshot::channel();
            inner.waiting.insert(id, (node.to_owned(), answer_tx));
            let sent = tx.send(ControllerMessage::ReadOutput { request: id, read });
            if sent.is_err() {
                inner.waiting.remove(&id);
                return Err(ReadFailure::NotConnected {
                    node: node.to_owned(),
                });
            }
            (id, answer_rx)
        };
        let answer = tokio::time::timeout(READ_TIMEOUT, rx).await;
        match answer {
            Ok(Ok(a)) => Ok(a),
            // Timed out, or the sender was dropped (never: answers remove it first).
            _ => {
                if let Ok(mut inner) = self.0.lock() {
                    inner.waiting.remove(&id);
                }
                Err(ReadFailure::TimedOut {
                    node: node.to_owned(),
                })
            }
        }
    }

    /// The agent of `node` answered read `request`: passed to the read that asked, if it
    /// still waits and asked that node (an answer from any other node is dropped).
    pub fn answered(&self, node: &str, request: u64, answer: OutputReadAnswer) {
        let Ok(mut inner) = self.0.lock() else {
            return;
        };
        match inner.waiting.get(&request) {
            Some((asked, _)) if asked == node => {
                if let Some((_, tx)) = inner.waiting.remove(&request) {
                    let _ = tx.send(answer);
                }
            }
            Some((asked, _)) => {
                tracing::warn!(node, asked = %asked, request, "an answer to a read of output from a node that was not asked: dropped");
            }
            None => {}
        }
    }

    /// Reads waiting for an answer now.
    pub fn waiting(&self) -> usize {
        self.0.lock().map_or(0, |i| i.waiting.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_core::job::JobId;
    use cadre_proto::agent::{OutputPiece, OutputStream, RunRef};

    fn request() -> OutputRequest {
        OutputRequest {
            run: RunRef::job_run(JobId(4), 0),
            task: 1,
            stream: OutputStream::Stdout,
            offset: Some(0),
            max: 100,
        }
    }

    fn piece(data: &str) -> OutputReadAnswer {
        OutputReadAnswer::Piece(OutputPiece {
            offset: 0,
            next_offset: data.len() as u64,
            size: data.len() as u64,
            data: data.into(),
            ended: false,
        })
    }

    #[tokio::test]
    async fn an_answer_reaches_the_read_that_asked_and_only_from_the_node_asked() {
        let reads = OutputReads::default();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        reads.link("n1", 1, READ_OUTPUT_VERSION, tx);
        let asking = {
            let reads = reads.clone();
            tokio::spawn(async move { reads.read("n1", request()).await })
        };
        let Some(ControllerMessage::ReadOutput { request: id, read }) = rx.recv().await else {
            panic!("no read sent");
        };
        assert_eq!(read, request());
        // Another node's agent answering that request is not heard.
        reads.answered("n2", id, piece("forged"));
        assert_eq!(reads.waiting(), 1);
        reads.answered("n1", id, piece("hello"));
        assert_eq!(asking.await.unwrap(), Ok(piece("hello")));
        assert_eq!(reads.waiting(), 0);
    }

    #[tokio::test]
    async fn reads_of_nodes_not_connected_or_too_old_fail_at_once_and_silence_times_out() {
        let reads = OutputReads::default();
        assert_eq!(
            reads.read("n1", request()).await,
            Err(ReadFailure::NotConnected { node: "n1".into() })
        );
        let (tx, _rx_old) = tokio::sync::mpsc::unbounded_channel();
        reads.link("n1", 1, READ_OUTPUT_VERSION - 1, tx);
        assert!(matches!(
            reads.read("n1", request()).await,
            Err(ReadFailure::TooOld { .. })
        ));
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        reads.link("n1", 2, READ_OUTPUT_VERSION, tx);
        // The old connection's close leaves the new one.
        reads.unlink("n1", 1);
        tokio::time::pause();
        assert_eq!(
            reads.read("n1", request()).await,
            Err(ReadFailure::TimedOut { node: "n1".into() })
        );
        assert_eq!(reads.waiting(), 0);
        reads.unlink("n1", 2);
        assert!(matches!(
            reads.read("n1", request()).await,
            Err(ReadFailure::NotConnected { .. })
        ));
    }
}
