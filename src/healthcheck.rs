//! `idem healthcheck`: asks a running idem's `GET /healthz` and says whether it answered 200,
//! for a container's `HEALTHCHECK` or any supervisor that runs a command (the image has no curl).
//! A refusal, an error or no answer in time is one line saying why.

use std::time::Duration;

/// Where `idem healthcheck` asks without `--url`: the image's idem, on the container's loopback.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080/healthz";

/// How long the answer may take: more than the probe `/healthz` gives the store (5 s), so a slow
/// store is told as its 503 rather than as no answer.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Why the check failed, in one line.
#[derive(Debug, thiserror::Error)]
pub enum Unhealthy {
    /// The URL is not one to ask.
    #[error("{0} is not an http(s) URL")]
    Url(String),
    /// No answer: refused, unreachable, or too slow.
    #[error("{url} did not answer: {why}")]
    NoAnswer {
        /// Where it asked.
        url: String,
        /// What happened.
        why: String,
    },
    /// An answer other than 200, with the first line of its body.
    #[error("{url} answered {status}: {said}")]
    Refused {
        /// Where it asked.
        url: String,
        /// The status.
        status: u16,
        /// What the body said (its `detail` for a problem), on one line.
        said: String,
    },
}

/// Asks `url` once: Ok when it answers 200 within [`TIMEOUT`].
pub fn check(url: &str) -> Result<(), Unhealthy> {
    let parsed = reqwest::Url::parse(url).map_err(|_| Unhealthy::Url(url.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Unhealthy::Url(url.to_string()));
    }
    let no_answer = |e: reqwest::Error| Unhealthy::NoAnswer {
        url: url.to_string(),
        why: one_line(&error_chain(&e)),
    };
    let client = reqwest::blocking::Client::builder()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("idem-healthcheck/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(no_answer)?;
    let response = client.get(parsed).send().map_err(no_answer)?;
    let status = response.status().as_u16();
    if status == 200 {
        return Ok(());
    }
    let body = response.text().unwrap_or_default();
    Err(Unhealthy::Refused {
        url: url.to_string(),
        status,
        said: said(&body),
    })
}

/// A problem's `detail`, or the body's first line, on one line and at most 200 characters.
fn said(body: &str) -> String {
    let detail = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("detail").and_then(|d| d.as_str()).map(str::to_string));
    let text = detail.unwrap_or_else(|| body.lines().next().unwrap_or("").to_string());
    let text = one_line(&text);
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None if text.is_empty() => "(no body)".to_string(),
        None => text,
    }
}

/// An error and its sources, `: `-joined (reqwest's own message is only "error sending request").
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_says_its_detail_and_other_bodies_their_first_line() {
        let problem = r#"{"type":"urn:idem:problem:unavailable","status":503,"detail":"the store cannot write: store: no answer within 5s"}"#;
        assert_eq!(
            said(problem),
            "the store cannot write: store: no answer within 5s"
        );
        assert_eq!(said("bad gateway\n<html>"), "bad gateway");
        assert_eq!(said(""), "(no body)");
        assert_eq!(said(&"x".repeat(300)).chars().count(), 201);
    }

    #[test]
    fn only_http_urls_are_asked() {
        assert!(matches!(
            check("ftp://127.0.0.1/healthz"),
            Err(Unhealthy::Url(_))
        ));
        assert!(matches!(check("not a url"), Err(Unhealthy::Url(_))));
    }
}
