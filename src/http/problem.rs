//! Every error idem answers, as RFC 9457 problem details (`application/problem+json`). Each kind
//! has its own `type` URI, status and title, listed once here; the `detail` says what to fix.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use idem_schemas::Problem;

/// The kinds of problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The `Idempotency-Key` header is malformed or repeated.
    InvalidIdempotencyKey,
    /// A header that must appear once appears more than once.
    RepeatedHeader,
    /// The content type is not JSON.
    UnsupportedMediaType,
    /// The body is over the limit.
    PayloadTooLarge,
    /// The body did not arrive in time.
    RequestTimeout,
    /// The body is not JSON.
    MalformedJson,
    /// The JSON is not a valid signal.
    InvalidSignal,
    /// No valid Bearer token.
    Unauthorized,
    /// A valid Bearer token without the scope the request needs.
    InsufficientScope,
    /// The tenant signs its requests, and this one carries no signature.
    SignatureRequired,
    /// No signature matched.
    InvalidSignature,
    /// `webhook-timestamp` is outside the tolerance.
    StaleTimestamp,
    /// `webhook-id` differs from `Idempotency-Key` on a signed request.
    WebhookIdMismatch,
    /// The tenant has no playbook for the signal type.
    UnknownSignalType,
    /// The key's first request is still being processed.
    KeyInFlight,
    /// The key was used with another payload.
    KeyReused,
    /// The tenant is over its rate limit.
    RateLimited,
    /// No such route, or no such resource for this tenant.
    NotFound,
    /// A query parameter is invalid.
    InvalidQuery,
    /// Only failed or dead deliveries can be redelivered.
    NotRedeliverable,
    /// A bulk redelivery's filter is not valid.
    InvalidFilter,
    /// A source's delivery is not authenticated by its provider's scheme.
    SourceUnauthenticated,
    /// A source's delivery does not have its provider's shape.
    InvalidEvents,
    /// A Shared Signals stream request is not valid.
    InvalidStream,
    /// The receiver has as many streams as it may.
    TooManyStreams,
    /// A source without `transmitter`: idem manages no stream for it.
    NotSubscribed,
    /// A subscribed source with no stream recorded yet (or deleted).
    NoStream,
    /// The transmitter did not do what idem asked of it.
    TransmitterFailed,
    /// The route exists, not with this method.
    MethodNotAllowed,
    /// The service is overloaded or shutting down.
    Unavailable,
    /// Something failed inside idem.
    Internal,
}

impl Kind {
    /// Every kind (for documentation and tests).
    pub const ALL: [Kind; 31] = [
        Kind::InvalidIdempotencyKey,
        Kind::RepeatedHeader,
        Kind::UnsupportedMediaType,
        Kind::PayloadTooLarge,
        Kind::RequestTimeout,
        Kind::MalformedJson,
        Kind::InvalidSignal,
        Kind::Unauthorized,
        Kind::InsufficientScope,
        Kind::SignatureRequired,
        Kind::InvalidSignature,
        Kind::StaleTimestamp,
        Kind::WebhookIdMismatch,
        Kind::UnknownSignalType,
        Kind::KeyInFlight,
        Kind::KeyReused,
        Kind::RateLimited,
        Kind::NotFound,
        Kind::InvalidQuery,
        Kind::NotRedeliverable,
        Kind::InvalidFilter,
        Kind::SourceUnauthenticated,
        Kind::InvalidEvents,
        Kind::InvalidStream,
        Kind::TooManyStreams,
        Kind::NotSubscribed,
        Kind::NoStream,
        Kind::TransmitterFailed,
        Kind::MethodNotAllowed,
        Kind::Unavailable,
        Kind::Internal,
    ];

    /// Status, slug (the end of the `type` URI) and title.
    pub fn describe(self) -> (StatusCode, &'static str, &'static str) {
        use StatusCode as S;
        match self {
            Kind::InvalidIdempotencyKey => (
                S::BAD_REQUEST,
                "invalid-idempotency-key",
                "Invalid Idempotency-Key",
            ),
            Kind::RepeatedHeader => (S::BAD_REQUEST, "repeated-header", "Header sent twice"),
            Kind::UnsupportedMediaType => (
                S::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Body must be JSON",
            ),
            Kind::PayloadTooLarge => (S::PAYLOAD_TOO_LARGE, "payload-too-large", "Body too large"),
            Kind::RequestTimeout => (S::REQUEST_TIMEOUT, "request-timeout", "Request too slow"),
            Kind::MalformedJson => (S::BAD_REQUEST, "malformed-json", "Body is not valid JSON"),
            Kind::InvalidSignal => (
                S::BAD_REQUEST,
                "invalid-signal",
                "Body is not a valid signal",
            ),
            Kind::Unauthorized => (
                S::UNAUTHORIZED,
                "unauthorized",
                "Missing or invalid API key",
            ),
            Kind::InsufficientScope => (
                S::FORBIDDEN,
                "insufficient-scope",
                "The access token lacks the scope needed",
            ),
            Kind::SignatureRequired => (
                S::UNAUTHORIZED,
                "signature-required",
                "Request must be signed",
            ),
            Kind::InvalidSignature => (
                S::UNAUTHORIZED,
                "invalid-signature",
                "Signature does not match",
            ),
            Kind::StaleTimestamp => (
                S::UNAUTHORIZED,
                "stale-timestamp",
                "Signature timestamp out of tolerance",
            ),
            Kind::WebhookIdMismatch => (
                S::BAD_REQUEST,
                "webhook-id-mismatch",
                "webhook-id must equal Idempotency-Key",
            ),
            Kind::UnknownSignalType => (
                S::BAD_REQUEST,
                "unknown-signal-type",
                "No playbook for this signal type",
            ),
            Kind::KeyInFlight => (
                S::CONFLICT,
                "key-in-flight",
                "Request with this key is in progress",
            ),
            Kind::KeyReused => (
                S::UNPROCESSABLE_ENTITY,
                "key-reused",
                "Key reused with another payload",
            ),
            Kind::RateLimited => (
                S::TOO_MANY_REQUESTS,
                "rate-limited",
                "Tenant over its rate limit",
            ),
            Kind::NotFound => (S::NOT_FOUND, "not-found", "No such resource"),
            Kind::InvalidQuery => (S::BAD_REQUEST, "invalid-query", "Invalid query parameter"),
            Kind::NotRedeliverable => (
                S::CONFLICT,
                "not-redeliverable",
                "Delivery is not failed or dead",
            ),
            Kind::InvalidFilter => (
                S::BAD_REQUEST,
                "invalid-filter",
                "Body is not a valid redelivery filter",
            ),
            Kind::SourceUnauthenticated => (
                S::UNAUTHORIZED,
                "source-unauthenticated",
                "Not authenticated as the source's provider",
            ),
            Kind::InvalidEvents => (
                S::BAD_REQUEST,
                "invalid-events",
                "Body is not the provider's delivery",
            ),
            Kind::InvalidStream => (
                S::BAD_REQUEST,
                "invalid-stream",
                "Body is not a valid stream request",
            ),
            Kind::TooManyStreams => (
                S::CONFLICT,
                "too-many-streams",
                "Receiver has as many streams as it may",
            ),
            Kind::NotSubscribed => (
                S::CONFLICT,
                "not-subscribed",
                "Source is not subscribed at a transmitter",
            ),
            Kind::NoStream => (
                S::CONFLICT,
                "no-stream",
                "No stream recorded for the source",
            ),
            Kind::TransmitterFailed => (
                S::BAD_GATEWAY,
                "transmitter-failed",
                "The transmitter did not do what was asked",
            ),
            Kind::MethodNotAllowed => (
                S::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "Method not allowed",
            ),
            Kind::Unavailable => (S::SERVICE_UNAVAILABLE, "unavailable", "Service unavailable"),
            Kind::Internal => (S::INTERNAL_SERVER_ERROR, "internal", "Internal error"),
        }
    }

    /// The `type` URI.
    pub fn uri(self) -> String {
        format!("urn:idem:problem:{}", self.describe().1)
    }
}

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    kind: Kind,
    detail: String,
    retry_after: Option<u64>,
    challenge: Option<String>,
}

impl ApiError {
    /// A problem of `kind` with `detail`.
    pub fn new(kind: Kind, detail: impl Into<String>) -> Self {
        ApiError {
            kind,
            detail: detail.into(),
            retry_after: None,
            challenge: None,
        }
    }

    /// With `WWW-Authenticate: {challenge}` (overriding the kind's default).
    pub fn challenge(mut self, challenge: impl Into<String>) -> Self {
        self.challenge = Some(challenge.into());
        self
    }

    /// A `500 internal` for a read of `what` (the tenant's deliveries, decisions) that failed
    /// with `e`, which is logged, not shown.
    pub fn read_failed(what: &str, e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "reading {what} failed");
        ApiError::new(Kind::Internal, format!("{what} could not be read; retry"))
    }

    /// With a `Retry-After` of `seconds` (overriding the kind's default).
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The `Retry-After` it was given, in seconds, if any.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
    }

    /// What it says to fix.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The slug of its kind (the end of its `type` URI).
    pub fn slug(&self) -> &'static str {
        self.kind.describe().1
    }

    /// The problem document.
    pub fn problem(&self) -> Problem {
        let (status, _, title) = self.kind.describe();
        Problem {
            problem_type: self.kind.uri(),
            title: title.to_string(),
            status: status.as_u16(),
            detail: self.detail.clone(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = self.problem();
        let status = self.kind.describe().0;
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        match self.kind {
            Kind::KeyInFlight => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
            }
            Kind::Unavailable => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            Kind::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(challenge) = self.challenge.and_then(|c| HeaderValue::try_from(c).ok()) {
            headers.insert(header::WWW_AUTHENTICATE, challenge);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_type() {
        let mut uris: Vec<String> = Kind::ALL.iter().map(|k| k.uri()).collect();
        uris.sort();
        uris.dedup();
        assert_eq!(uris.len(), Kind::ALL.len());
    }
}
