//! Each provider's own authentication, checked over the raw bytes before anything is parsed or
//! stored. Every comparison of a secret or a MAC is in constant time, and a source's secrets are
//! a list, any one of which is accepted, so a provider's secret can be rotated without a gap.
//!
//! - `stripe`: `Stripe-Signature: t=<unix s>,v1=<hex>[,v1=…]`, HMAC-SHA-256 of `t.body` keyed
//!   with the secret string as Stripe issues it (`whsec_…`), `t` within the tolerance.
//! - `github`: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA-256 of the body.
//! - `standard`: Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
//! - `okta`: the `Authorization` header equals the configured value.
//! - `auth0`, `cloudevents`: `Authorization: Bearer <secret>`.
//! - `ssf`: the configured `Authorization` value, if one is configured (the SET itself is
//!   signed, and its signature is checked by `set`).
//! - `twilio`: `X-Twilio-Signature`, base64 HMAC-SHA-1 under the auth token of the full URL
//!   Twilio posted to, whose `bodySHA256` query parameter is the hex SHA-256 of the body.

use axum::http::{HeaderMap, Uri};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use idem_schemas::hash::{hmac_sha1, hmac_sha256, sha256};
use idem_schemas::signature::{self, VerifyError};
use subtle::ConstantTimeEq;

use super::{Source, SourceKind};

/// Why a delivery is not the provider's.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    /// A header the scheme needs is missing (or not ASCII).
    #[error("send the {0} header this source is authenticated by")]
    Missing(&'static str),
    /// The credential or signature matches no secret of the source.
    #[error("{0} does not match this source's secret")]
    Mismatch(&'static str),
    /// The signed timestamp is outside the tolerance.
    #[error("the signed timestamp is more than {0} s from the server's clock")]
    Stale(u64),
    /// The header does not have the scheme's form.
    #[error("{0}")]
    Malformed(&'static str),
    /// A header the scheme reads came twice: which one would a proxy in front have checked?
    #[error("send the {0} header once, not twice")]
    Repeated(&'static str),
}

/// What the check reads of a delivery.
pub struct Received<'a> {
    /// Its headers.
    pub headers: &'a HeaderMap,
    /// The path and query it was posted to.
    pub uri: &'a Uri,
    /// Its raw body.
    pub body: &'a [u8],
    /// The server's clock, unix seconds.
    pub now_secs: i64,
    /// `signatures.tolerance`, in seconds.
    pub tolerance_secs: u64,
    /// Where senders reach idem: `public_url`, or `http://` and the address idem listens on
    /// (only allowed on loopback), whatever the request's headers say. Read for `twilio` only.
    pub base_url: &'a str,
}

/// The headers a source's scheme or its event's identity is read from: sent twice, which one
/// would a proxy in front have checked? Refused for every source alike, before it is looked
/// up, so that the answer shows nothing of what the source is.
pub const READ_ONCE: [&str; 9] = [
    "authorization",
    "stripe-signature",
    "x-hub-signature-256",
    "x-github-event",
    "x-github-delivery",
    "x-twilio-signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
];

/// The first header of [`READ_ONCE`] that `headers` holds more than once.
pub fn repeated(headers: &HeaderMap) -> Option<&'static str> {
    if headers.len() == headers.keys_len() {
        // No header at all is sent twice.
        return None;
    }
    READ_ONCE
        .into_iter()
        .find(|name| headers.get_all(*name).iter().nth(1).is_some())
}

fn header<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h str, Refused> {
    let mut values = headers.get_all(name).iter();
    let value = values.next().and_then(|v| v.to_str().ok());
    if values.next().is_some() {
        return Err(Refused::Repeated(name));
    }
    value.ok_or(Refused::Missing(name))
}

/// Checks that `delivery` comes from the provider `source` is configured for.
pub fn check(source: &Source, delivery: &Received<'_>) -> Result<(), Refused> {
    let headers = delivery.headers;
    match source.kind {
        SourceKind::Okta => {
            let value = header(headers, "authorization")?;
            one_of(source, value)
        }
        SourceKind::Auth0 | SourceKind::Cloudevents => {
            let value = header(headers, "authorization")?;
            let token = value
                .split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, token)| token.trim())
                .ok_or(Refused::Malformed(
                    "the Authorization scheme must be Bearer",
                ))?;
            one_of(source, token)
        }
        // A SET's signature is checked by `set`; the push's `Authorization`, when configured, is
        // the value the transmitter was given.
        SourceKind::Ssf if source.secrets.is_empty() => Ok(()),
        SourceKind::Ssf => one_of(source, header(headers, "authorization")?),
        SourceKind::Github => {
            let value = header(headers, "x-hub-signature-256")?;
            let tag = value
                .strip_prefix("sha256=")
                .and_then(idem_schemas::hex::decode)
                .ok_or(Refused::Malformed(
                    "X-Hub-Signature-256 must be sha256=<hex digest>",
                ))?;
            let matches = source.secrets.iter().any(|s| {
                let expected = hmac_sha256(s.as_bytes(), &[delivery.body]);
                bool::from(expected.as_slice().ct_eq(&tag))
            });
            match matches {
                true => Ok(()),
                false => Err(Refused::Mismatch("X-Hub-Signature-256")),
            }
        }
        SourceKind::Stripe => stripe(source, delivery),
        SourceKind::Twilio => twilio(source, delivery),
        SourceKind::Standard => {
            let id = header(headers, "webhook-id")?;
            let timestamp = header(headers, "webhook-timestamp")?;
            let signatures = header(headers, "webhook-signature")?;
            // The signature first, then the time: only a sender holding the secret learns that
            // its clock is off.
            signature::verify(
                &source.standard_secrets,
                id,
                timestamp,
                signatures,
                delivery.body,
                delivery.now_secs,
                u64::MAX,
            )
            .map_err(|e| match e {
                VerifyError::Stale => Refused::Stale(delivery.tolerance_secs),
                VerifyError::BadTimestamp => {
                    Refused::Malformed("webhook-timestamp must be unix seconds")
                }
                VerifyError::NoMatch => Refused::Mismatch("webhook-signature"),
            })?;
            let seconds: i64 = timestamp
                .trim()
                .parse()
                .map_err(|_| Refused::Malformed("webhook-timestamp must be unix seconds"))?;
            match delivery.now_secs.abs_diff(seconds) > delivery.tolerance_secs {
                true => Err(Refused::Stale(delivery.tolerance_secs)),
                false => Ok(()),
            }
        }
    }
}

/// An `Authorization` credential that is one of the source's secrets, compared in constant
/// time with each (as SHA-256 digests, so that not even the secret's length shows).
fn one_of(source: &Source, credential: &str) -> Result<(), Refused> {
    let presented = sha256(credential.as_bytes());
    let matches = source
        .secrets
        .iter()
        .any(|s| bool::from(sha256(s.as_bytes()).ct_eq(&presented)));
    match matches {
        true => Ok(()),
        false => Err(Refused::Mismatch("Authorization")),
    }
}

/// `Stripe-Signature: t=…,v1=…`: one `v1` matching any secret suffices, then the timestamp.
fn stripe(source: &Source, delivery: &Received<'_>) -> Result<(), Refused> {
    let value = header(delivery.headers, "stripe-signature")?;
    let mut timestamp = None;
    let mut tags = Vec::new();
    for item in value.split(',') {
        match item.trim().split_once('=') {
            Some(("t", t)) => timestamp = Some(t),
            Some(("v1", tag)) => tags.extend(idem_schemas::hex::decode(tag)),
            _ => {}
        }
    }
    let malformed = Refused::Malformed("Stripe-Signature must be t=<unix seconds>,v1=<hex>");
    let timestamp = timestamp.ok_or(malformed)?;
    let seconds: i64 = timestamp.parse().map_err(|_| malformed)?;
    let matches = source.secrets.iter().any(|s| {
        let signed = [timestamp.as_bytes(), b".", delivery.body];
        let expected = hmac_sha256(s.as_bytes(), &signed);
        tags.iter()
            .any(|tag| bool::from(tag.as_slice().ct_eq(expected.as_slice())))
    });
    if !matches {
        return Err(Refused::Mismatch("Stripe-Signature"));
    }
    if delivery.now_secs.abs_diff(seconds) > delivery.tolerance_secs {
        return Err(Refused::Stale(delivery.tolerance_secs));
    }
    Ok(())
}

/// `X-Twilio-Signature`: the body is bound by the URL's `bodySHA256`, and the URL by the
/// signature. The URL is where senders reach idem (`public_url`) and the path and query Twilio
/// posted to, never what the request's `Host` or `X-Forwarded-*` say (the client chooses those,
/// so a signature made for another deployment's URL would pass). Twilio's own validators take
/// the URL with and without its scheme's default port; so does idem.
fn twilio(source: &Source, delivery: &Received<'_>) -> Result<(), Refused> {
    let signature = header(delivery.headers, "x-twilio-signature")?;
    let tag = STANDARD
        .decode(signature.trim())
        .map_err(|_| Refused::Malformed("X-Twilio-Signature must be base64"))?;
    let body_sha = delivery
        .uri
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("bodySHA256="))
        .ok_or(Refused::Malformed(
            "the URL Twilio posts to carries bodySHA256 for a JSON body",
        ))?;
    let digest = idem_schemas::lower_hex(&sha256(delivery.body));
    if !bool::from(
        digest
            .as_bytes()
            .ct_eq(body_sha.to_ascii_lowercase().as_bytes()),
    ) {
        return Err(Refused::Mismatch("bodySHA256"));
    }
    let path = delivery.uri.path_and_query().map_or("/", |p| p.as_str());
    let base = delivery.base_url;
    let mut urls = vec![format!("{base}{path}")];
    if let Some((scheme, host)) = base.split_once("://") {
        let default_port = match scheme {
            "https" => Some(":443"),
            "http" => Some(":80"),
            _ => None,
        };
        // A host with a port of its own (or an IPv6 literal) is taken as it is.
        if let (Some(port), false) = (default_port, host.contains(':')) {
            urls.push(format!("{scheme}://{host}{port}{path}"));
        }
    }
    let matches = urls.into_iter().any(|url| {
        source.secrets.iter().any(|s| {
            let expected = hmac_sha1(s.as_bytes(), &[url.as_bytes()]);
            bool::from(expected.as_slice().ct_eq(&tag))
        })
    });
    match matches {
        true => Ok(()),
        false => Err(Refused::Mismatch("X-Twilio-Signature")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Source;

    fn source(kind: SourceKind, secrets: &[&str]) -> Source {
        Source {
            name: "s".into(),
            kind,
            secrets: secrets.iter().map(|s| s.to_string()).collect(),
            standard_secrets: match kind {
                SourceKind::Standard => secrets
                    .iter()
                    .map(|s| idem_schemas::signature::Secret::parse(s).expect("secret"))
                    .collect(),
                _ => Vec::new(),
            },
            ssf: None,
            routes: Vec::new(),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, value.parse().expect("header value"));
        }
        h
    }

    fn check_at(
        source: &Source,
        headers: &HeaderMap,
        uri: &str,
        body: &[u8],
        now_secs: i64,
    ) -> Result<(), Refused> {
        let uri: Uri = uri.parse().expect("uri");
        check(
            source,
            &Received {
                headers,
                uri: &uri,
                body,
                now_secs,
                tolerance_secs: 300,
                base_url: "https://mycompany.com",
            },
        )
    }

    // GitHub's published example ("Validating webhook deliveries").
    #[test]
    fn github_matches_its_published_example() {
        let s = source(SourceKind::Github, &["old", "It's a Secret to Everybody"]);
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        let h = headers(&[("x-hub-signature-256", sig)]);
        assert_eq!(check_at(&s, &h, "/", b"Hello, World!", 0), Ok(()));
        assert_eq!(
            check_at(&s, &h, "/", b"Hello, World?", 0),
            Err(Refused::Mismatch("X-Hub-Signature-256"))
        );
        let wrong = source(SourceKind::Github, &["It's a secret to everybody"]);
        assert!(check_at(&wrong, &h, "/", b"Hello, World!", 0).is_err());
        assert_eq!(
            check_at(&s, &HeaderMap::new(), "/", b"Hello, World!", 0),
            Err(Refused::Missing("x-hub-signature-256"))
        );
    }

    // stripe-dotnet's signed fixture (event_test_signature.json, with its final newline).
    #[test]
    fn stripe_matches_a_published_signature_within_the_tolerance() {
        let body = include_bytes!("../../tests/vectors/stripe_event.json");
        let s = source(SourceKind::Stripe, &["webhook_secret"]);
        let header = "t=1533204620,v1=2220f87ef101a04665f11cdf770523143f875572008577fa0f20882ddb9cc3c7,v0=63f3a72374a733066c4be69ed7f8e5ac85c22c9f0a6a612ab9a025a9e4ee7eef";
        let h = headers(&[("stripe-signature", header)]);
        assert_eq!(check_at(&s, &h, "/", body, 1533204720), Ok(()));
        // Either way outside the tolerance.
        assert_eq!(
            check_at(&s, &h, "/", body, 1533204620 + 301),
            Err(Refused::Stale(300))
        );
        assert_eq!(
            check_at(&s, &h, "/", body, 1533204620 - 301),
            Err(Refused::Stale(300))
        );
        // One body byte off, and the v0 scheme alone, match nothing.
        assert!(check_at(&s, &h, "/", &body[..body.len() - 1], 1533204720).is_err());
        let v0_only = headers(&[(
            "stripe-signature",
            "t=1533204620,v0=63f3a72374a733066c4be69ed7f8e5ac85c22c9f0a6a612ab9a025a9e4ee7eef",
        )]);
        assert!(check_at(&s, &v0_only, "/", body, 1533204720).is_err());
        // Several v1 values (a secret being rolled): one match suffices.
        let two = headers(&[("stripe-signature", "t=1533204620,v1=00ff,v1=2220f87ef101a04665f11cdf770523143f875572008577fa0f20882ddb9cc3c7")]);
        assert_eq!(check_at(&s, &two, "/", body, 1533204720), Ok(()));
    }

    // twilio-python's test_validation_of_body_succeeds.
    #[test]
    fn twilio_matches_a_published_signature_over_the_url_and_body_hash() {
        let body = br#"{"property": "value", "boolean": true}"#;
        let uri = "/myapp.php?foo=1&bar=2&bodySHA256=0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620";
        let s = source(SourceKind::Twilio, &["12345"]);
        let at = |base_url: &str, headers: &HeaderMap, uri: &str, body: &[u8]| {
            let uri: Uri = uri.parse().expect("uri");
            check(
                &s,
                &Received {
                    headers,
                    uri: &uri,
                    body,
                    now_secs: 0,
                    tolerance_secs: 300,
                    base_url,
                },
            )
        };
        // Signed over https://mycompany.com/myapp.php?…, without and with the port.
        for sig in [
            "a9nBmqA0ju/hNViExpshrM61xv4=",
            "uzN7O1319XdYoYMfTT2eUM1PJT0=",
        ] {
            let h = headers(&[("x-twilio-signature", sig)]);
            assert_eq!(at("https://mycompany.com", &h, uri, body), Ok(()), "{sig}");
        }
        let h = headers(&[("x-twilio-signature", "a9nBmqA0ju/hNViExpshrM61xv4=")]);
        // Another body than the hash names, another token, no bodySHA256.
        assert_eq!(
            at(
                "https://mycompany.com",
                &h,
                uri,
                br#"{"property": "other", "boolean": true}"#
            ),
            Err(Refused::Mismatch("bodySHA256"))
        );
        assert!(check_at(&source(SourceKind::Twilio, &["54321"]), &h, uri, body, 0).is_err());
        assert!(at("https://mycompany.com", &h, "/myapp.php?foo=1&bar=2", body).is_err());
        // The URL is idem's own: Host and X-Forwarded-* naming the signed host change nothing.
        let claimed = headers(&[
            ("host", "mycompany.com"),
            ("x-forwarded-host", "mycompany.com"),
            ("x-forwarded-proto", "https"),
            ("x-twilio-signature", "a9nBmqA0ju/hNViExpshrM61xv4="),
        ]);
        assert_eq!(
            at("https://idem.example.com", &claimed, uri, body),
            Err(Refused::Mismatch("X-Twilio-Signature")),
            "a request naming the signed host is not taken at another URL"
        );
        assert!(at("http://mycompany.com", &claimed, uri, body).is_err());
        assert_eq!(at("https://mycompany.com", &claimed, uri, body), Ok(()));
    }

    #[test]
    fn a_header_read_once_is_found_when_sent_twice() {
        let mut h = headers(&[("x-github-event", "push"), ("authorization", "a")]);
        assert_eq!(repeated(&h), None);
        h.append("accept", "a".parse().expect("value"));
        h.append("accept", "b".parse().expect("value"));
        assert_eq!(repeated(&h), None, "a header not read once may come twice");
        h.append("x-github-event", "issues".parse().expect("value"));
        assert_eq!(repeated(&h), Some("x-github-event"));
    }

    // The Standard Webhooks Rust library's signing example.
    #[test]
    fn standard_matches_the_libraries_example() {
        let s = source(
            SourceKind::Standard,
            &["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"],
        );
        let h = headers(&[
            ("webhook-id", "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk"),
            ("webhook-timestamp", "1649367553"),
            (
                "webhook-signature",
                "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
            ),
        ]);
        let body = br#"{"email":"test@example.com","username":"test_user"}"#;
        assert_eq!(check_at(&s, &h, "/", body, 1649367553), Ok(()));
        assert_eq!(
            check_at(&s, &h, "/", body, 1649367553 + 301),
            Err(Refused::Stale(300))
        );
        assert!(check_at(&s, &h, "/", b"{}", 1649367553).is_err());
        // The signature before the time: an unsigned body is not told that its time is off.
        assert_eq!(
            check_at(&s, &h, "/", b"{}", 1649367553 + 301),
            Err(Refused::Mismatch("webhook-signature"))
        );
    }

    #[test]
    fn okta_and_auth0_compare_the_configured_credential() {
        let okta = source(SourceKind::Okta, &["Basic c2VjcmV0", "new-value"]);
        let ok = headers(&[("authorization", "new-value")]);
        assert_eq!(check_at(&okta, &ok, "/", b"{}", 0), Ok(()));
        let wrong = headers(&[("authorization", "new-valuE")]);
        assert_eq!(
            check_at(&okta, &wrong, "/", b"{}", 0),
            Err(Refused::Mismatch("Authorization"))
        );
        let auth0 = source(SourceKind::Auth0, &["tok-1"]);
        let bearer = headers(&[("authorization", "Bearer tok-1")]);
        assert_eq!(check_at(&auth0, &bearer, "/", b"[]", 0), Ok(()));
        let bare = headers(&[("authorization", "tok-1")]);
        assert!(check_at(&auth0, &bare, "/", b"[]", 0).is_err());
        assert_eq!(
            check_at(&auth0, &HeaderMap::new(), "/", b"[]", 0),
            Err(Refused::Missing("authorization"))
        );
        // Two credentials, the first or the second valid: neither is taken.
        for (a, b) in [("new-value", "wrong"), ("wrong", "new-value")] {
            let mut two = headers(&[("authorization", a)]);
            two.append("authorization", b.parse().expect("header value"));
            assert_eq!(
                check_at(&okta, &two, "/", b"{}", 0),
                Err(Refused::Repeated("authorization"))
            );
        }
    }
}
