//! etcd's members, one client each, and requests that move to the next member when theirs
//! goes away or stalls.
//!
//! etcd-client balances requests over one channel to every endpoint, but a member that is
//! stopped (`SIGSTOP`, a stalled disk) keeps its TCP connection open and answers nothing, so
//! a request (a keep-alive, a commit) balanced to it waits until its own timeout, longer than
//! a lease lives. Here every request has a deadline well under the lease's time to live and
//! goes to one member; one that gets no answer in time, or whose member refused the
//! connection, goes to the next. A request that may have reached etcd (no answer, not
//! refused) is only sent again when the caller says it is safe to ([`Retry`]): a commit's
//! outcome is read back instead (see `requests::fenced_puts`).

use etcd_client::{Client, ConnectOptions};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Mutex;

/// One member: its endpoint, and a client to it once connected.
struct Member {
    endpoint: String,
    client: Mutex<Option<Client>>,
}

/// etcd's members, and which one requests go to first (the last that answered).
pub(super) struct Members {
    members: Vec<Member>,
    options: ConnectOptions,
    preferred: AtomicUsize,
    /// How long one request waits for one member's answer.
    deadline: Duration,
}

impl std::fmt::Debug for Members {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endpoints: Vec<&str> = self.members.iter().map(|m| m.endpoint.as_str()).collect();
        f.debug_struct("Members")
            .field("endpoints", &endpoints)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// Whether a request that failed may be sent again to another member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// Sending it twice does no harm (a read, a keep-alive, a revocation).
    Idempotent,
    /// Only if it never reached a member (a write): otherwise its outcome is unknown.
    IfUnsent,
}

/// Why a request got no answer from any member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Failure {
    /// etcd answered with an error (the request reached it and was refused).
    Answered(String),
    /// No member answered, and the request never reached one.
    Unsent(String),
    /// It may have reached a member (sent, no answer within the deadline, or the connection
    /// lost after sending): whether etcd applied it is unknown.
    Unknown(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Answered(why) | Failure::Unsent(why) => f.write_str(why),
            Failure::Unknown(why) => write!(f, "{why} (whether etcd applied it is unknown)"),
        }
    }
}

/// What one attempt's failure says about where the request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reached {
    /// Never sent: the member refused the connection.
    No,
    /// Perhaps: sent, and the member went away or stalled before answering.
    Perhaps,
    /// Yes: etcd answered it with an error.
    Answered,
}

/// Plain data: where a request whose attempt ended in `err` got.
pub(super) fn reached(err: &etcd_client::Error) -> Reached {
    match err {
        etcd_client::Error::TransportError(_) => Reached::No,
        etcd_client::Error::GRpcStatus(status) => match status.code() {
            tonic::Code::Unavailable if status.message().contains("connect") => Reached::No,
            tonic::Code::Unavailable
            | tonic::Code::Unknown
            | tonic::Code::Cancelled
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Internal => Reached::Perhaps,
            _ => Reached::Answered,
        },
        etcd_client::Error::IoError(_) => Reached::Perhaps,
        _ => Reached::Answered,
    }
}

/// Plain data: what the caller learns when no member answered: `Unknown` as soon as one
/// attempt may have reached etcd, `Unsent` when none did.
pub(super) fn failure(attempts: &[(Reached, String)]) -> Failure {
    let why = attempts
        .iter()
        .map(|(_, why)| why.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let why = if why.is_empty() {
        "no etcd member to ask".to_string()
    } else {
        why
    };
    if attempts.iter().any(|(r, _)| *r == Reached::Perhaps) {
        Failure::Unknown(why)
    } else {
        Failure::Unsent(why)
    }
}

impl Members {
    /// The members at `endpoints` (connected when first asked), each request waiting at
    /// most `deadline` for one member's answer.
    pub(super) fn new(
        endpoints: &[String],
        options: ConnectOptions,
        deadline: Duration,
    ) -> Members {
        Members {
            members: endpoints
                .iter()
                .map(|endpoint| Member {
                    endpoint: endpoint.clone(),
                    client: Mutex::new(None),
                })
                .collect(),
            options,
            preferred: AtomicUsize::new(0),
            deadline,
        }
    }

    /// How long one request waits for one member.
    pub(super) fn deadline(&self) -> Duration {
        self.deadline
    }

    /// How many members there are.
    pub(super) fn len(&self) -> usize {
        self.members.len()
    }

    /// The member requests go to first.
    pub(super) fn preferred(&self) -> usize {
        self.preferred.load(Ordering::Relaxed) % self.members.len().max(1)
    }

    /// Makes `index` the member requests go to first (it answered).
    pub(super) fn prefer(&self, index: usize) {
        self.preferred.store(index, Ordering::Relaxed);
    }

    /// The client of member `index`, connected now if it is not yet (within the deadline).
    pub(super) async fn client(&self, index: usize) -> Result<Client, String> {
        let member = self
            .members
            .get(index % self.members.len().max(1))
            .ok_or_else(|| "no etcd member to ask".to_string())?;
        let mut slot = member.client.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let connect = Client::connect([member.endpoint.as_str()], Some(self.options.clone()));
        let client = tokio::time::timeout(self.deadline, connect)
            .await
            .map_err(|_| format!("{}: no answer when connecting", member.endpoint))?
            .map_err(|e| format!("{}: {e}", member.endpoint))?;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Sends `request` to the members in turn, from the preferred one, each within the
    /// deadline, until one answers; `retry` says whether an attempt that may have reached
    /// etcd is sent again. The answer, or why none came.
    pub(super) async fn call<T, F, Fut>(&self, retry: Retry, request: F) -> Result<T, Failure>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_within(self.deadline, retry, request).await
    }

    /// [`Members::call`] with each member given `deadline` (the first request at start,
    /// which also opens the connection).
    pub(super) async fn call_within<T, F, Fut>(
        &self,
        deadline: Duration,
        retry: Retry,
        mut request: F,
    ) -> Result<T, Failure>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let first = self.preferred();
        let mut attempts = Vec::new();
        for turn in 0..self.members.len() {
            let index = (first + turn) % self.members.len();
            let endpoint = &self.members[index].endpoint;
            let client = match self.client(index).await {
                Ok(client) => client,
                Err(why) => {
                    attempts.push((Reached::No, why));
                    continue;
                }
            };
            let outcome = match tokio::time::timeout(deadline, request(client)).await {
                Ok(Ok(answer)) => {
                    self.prefer(index);
                    return Ok(answer);
                }
                Ok(Err(err)) => (reached(&err), format!("{endpoint}: {err}")),
                Err(_) => (
                    Reached::Perhaps,
                    format!(
                        "{endpoint}: no answer within {}",
                        humantime::format_duration(deadline)
                    ),
                ),
            };
            match outcome.0 {
                Reached::Answered => return Err(Failure::Answered(outcome.1)),
                Reached::Perhaps if retry == Retry::IfUnsent => {
                    attempts.push(outcome);
                    // The next request of this node starts from another member.
                    self.prefer(index + 1);
                    return Err(failure(&attempts));
                }
                _ => attempts.push(outcome),
            }
        }
        Err(failure(&attempts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: tonic::Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    #[test]
    fn a_refused_connection_never_reached_etcd_and_a_lost_answer_may_have() {
        assert_eq!(
            reached(&status(tonic::Code::Unavailable, "tcp connect error")),
            Reached::No
        );
        assert_eq!(
            reached(&status(tonic::Code::Unknown, "transport error")),
            Reached::Perhaps
        );
        assert_eq!(
            reached(&status(tonic::Code::Cancelled, "Timeout expired")),
            Reached::Perhaps
        );
        assert_eq!(
            reached(&status(tonic::Code::NotFound, "requested lease not found")),
            Reached::Answered
        );
    }

    #[test]
    fn one_attempt_that_may_have_reached_etcd_makes_the_outcome_unknown() {
        assert_eq!(
            failure(&[]),
            Failure::Unsent("no etcd member to ask".into())
        );
        let refused = (Reached::No, "a: refused".to_string());
        let lost = (Reached::Perhaps, "b: no answer".to_string());
        assert_eq!(
            failure(std::slice::from_ref(&refused)),
            Failure::Unsent("a: refused".into())
        );
        let unknown = failure(&[refused, lost]);
        assert_eq!(unknown, Failure::Unknown("a: refused; b: no answer".into()));
        assert!(unknown.to_string().contains("unknown"));
    }
}
