//! Keyed signals and the answers their first requests got, for the tests that stop or break a
//! server and then check that every answered key replays its first answer byte for byte.

use crate::support::client::{sim_swap, unique, Client, Req, Resp};

/// A keyed signal and the answer its first request got.
pub struct Answered {
    pub key: String,
    pub body: String,
    pub first: Vec<u8>,
}

impl Answered {
    /// The signal's request, signed anew (tenant acme).
    pub fn request(&self) -> Req {
        Req::new(&self.body).key(&self.key).acme_signed(&self.key)
    }
}

/// Asserts that every signal of `answered` replays its first answer byte for byte at `base`.
pub async fn assert_replays(base: &str, answered: &[Answered]) {
    let client = Client::new(base);
    for a in answered {
        let r = client.signal(a.request()).await;
        assert_eq!(
            r.status,
            201,
            "{}: {}",
            a.key,
            String::from_utf8_lossy(&r.body)
        );
        assert!(r.replayed(), "{}: a replay", a.key);
        assert_eq!(r.body, a.first, "{}: the same bytes", a.key);
    }
}

/// Sends new keyed signals (tenant acme) one at a time until one is not answered 201, at most
/// `limit`: the answered ones, then the first that was not, with its answer (none when the
/// connection broke: the server went away).
pub async fn send_until_refused(
    base: &str,
    limit: usize,
) -> (Vec<Answered>, Option<(Answered, Option<Resp>)>) {
    let client = Client::new(base);
    let mut answered = Vec::new();
    for n in 0..limit {
        let mut a = Answered {
            key: unique("refused"),
            body: sim_swap(&format!("+4477{n:08}")),
            first: Vec::new(),
        };
        match client.try_send("POST", "/v1/signals", a.request()).await {
            Ok(r) if r.status == 201 => {
                a.first = r.body;
                answered.push(a);
            }
            Ok(r) => return (answered, Some((a, Some(r)))),
            Err(_) => return (answered, Some((a, None))),
        }
    }
    (answered, None)
}
