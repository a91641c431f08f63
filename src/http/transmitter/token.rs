//! `POST /ssf/{tenant}/token`: OAuth 2.0 client credentials (RFC 6749 §4.4) for the tenant's
//! receivers, authenticated by `client_secret_basic` or `client_secret_post` (one, not both),
//! the secret compared in constant time. The answer is a Bearer token (RFC 6750) that any node
//! checks, granted the `scope` asked for (`ssf.read`, `ssf.manage`) within the receiver's
//! `scopes`, or all of those when it asks for none; refusals are RFC 6749 §5.2's JSON errors.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, Extensions, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Form, Json};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use idem_schemas::timefmt::now_ms;
use idem_schemas::{AccessToken, OAuthError};
use percent_encoding::percent_decode_str;
use subtle::ConstantTimeEq;

use super::find;
use super::token_limit::Requester;
use crate::http::App;
use crate::transmitter::token::{self, Scopes};

/// A refusal, answered as an RFC 6749 §5.2 error.
struct Refusal {
    status: StatusCode,
    error: &'static str,
    description: String,
    /// Answered with `WWW-Authenticate: Basic` (the client tried Basic).
    basic: bool,
    /// Answered with `Retry-After`, in seconds.
    retry_after: Option<u64>,
}

impl Refusal {
    fn request(description: impl Into<String>) -> Self {
        Refusal {
            status: StatusCode::BAD_REQUEST,
            error: "invalid_request",
            description: description.into(),
            basic: false,
            retry_after: None,
        }
    }

    fn client(basic: bool) -> Self {
        Refusal {
            status: StatusCode::UNAUTHORIZED,
            error: "invalid_client",
            description: "unknown client or wrong secret".into(),
            basic,
            retry_after: None,
        }
    }

    /// Too many failed requests of this client or address: 429 (RFC 6585) with
    /// `Retry-After`, in RFC 6749's error form as `temporarily_unavailable`.
    fn too_many(wait: u64) -> Self {
        Refusal {
            status: StatusCode::TOO_MANY_REQUESTS,
            error: "temporarily_unavailable",
            description: format!(
                "too many failed token requests of this client or address; retry after {wait} s"
            ),
            basic: false,
            retry_after: Some(wait),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = OAuthError {
            error: self.error.to_string(),
            error_description: self.description,
        };
        let mut response = (self.status, Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(wait) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(wait));
        }
        if self.basic {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"idem\""),
            );
        }
        response
    }
}

/// `client_id` and `client_secret` from an `Authorization: Basic` header (each form-encoded,
/// RFC 6749 §2.3.1).
fn basic(headers: &HeaderMap) -> Result<Option<(String, String)>, Refusal> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let malformed = || Refusal::request("the Authorization header is not Basic credentials");
    let encoded = value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .map(|(_, c)| c.trim())
        .ok_or_else(malformed)?;
    let decoded = STANDARD
        .decode(encoded)
        .ok()
        .and_then(|d| String::from_utf8(d).ok())
        .ok_or_else(malformed)?;
    let (id, secret) = decoded.split_once(':').ok_or_else(malformed)?;
    let form_decoded = |s: &str| {
        percent_decode_str(&s.replace('+', " "))
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| malformed())
    };
    Ok(Some((form_decoded(id)?, form_decoded(secret)?)))
}

/// The scopes a token is granted: those `asked` for (RFC 6749 §3.3), each among the receiver's
/// `allowed`; all it is allowed when it asks for none.
fn granted(asked: Option<&str>, allowed: Scopes) -> Result<Scopes, Refusal> {
    let invalid = |description: String| Refusal {
        status: StatusCode::BAD_REQUEST,
        error: "invalid_scope",
        description,
        basic: false,
        retry_after: None,
    };
    let asked = match asked {
        None => return Ok(allowed),
        Some(asked) => {
            Scopes::parse(asked.split(' ').filter(|s| !s.is_empty())).map_err(|name| {
                invalid(format!(
                    "{name:?} is not a scope: ask for ssf.read, ssf.manage or both"
                ))
            })?
        }
    };
    match asked {
        None => Ok(allowed),
        Some(asked) if asked.within(allowed) => Ok(asked),
        Some(_) => Err(invalid(format!(
            "this client may be granted {} only",
            allowed.names()
        ))),
    }
}

/// The token endpoint.
pub async fn issue(
    State(app): State<Arc<App>>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
    extensions: Extensions,
    form: Result<Form<Vec<(String, String)>>, FormRejection>,
) -> Response {
    let address = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip());
    match grant(&app, &tenant, &headers, address, form) {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

fn grant(
    app: &App,
    tenant: &str,
    headers: &HeaderMap,
    address: Option<std::net::IpAddr>,
    form: Result<Form<Vec<(String, String)>>, FormRejection>,
) -> Result<Response, Refusal> {
    let live = app.live.load_full();
    let (tenant, ssf) = find(&live, tenant).map_err(|_| Refusal {
        status: StatusCode::NOT_FOUND,
        error: "invalid_request",
        description: "no Shared Signals transmitter here".into(),
        basic: false,
        retry_after: None,
    })?;
    let Form(fields) =
        form.map_err(|_| Refusal::request("send an application/x-www-form-urlencoded body"))?;
    let field = |name: &str| -> Result<Option<&str>, Refusal> {
        let mut values = fields.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
        match (values.next(), values.next()) {
            (Some(_), Some(_)) => Err(Refusal::request(format!("{name} is sent twice"))),
            (value, _) => Ok(value.map(String::as_str)),
        }
    };
    match field("grant_type")? {
        Some("client_credentials") => {}
        Some(_) => {
            return Err(Refusal {
                status: StatusCode::BAD_REQUEST,
                error: "unsupported_grant_type",
                description: "only client_credentials is granted".into(),
                basic: false,
                retry_after: None,
            })
        }
        None => return Err(Refusal::request("grant_type is required")),
    }
    let from_basic = basic(headers)?;
    let posted = (field("client_id")?, field("client_secret")?);
    let (client_id, secret, is_basic) = match (from_basic, posted) {
        (Some(_), (_, Some(_))) => {
            return Err(Refusal::request(
                "authenticate by Basic or by client_secret in the body, not both",
            ))
        }
        (Some((id, secret)), _) => (id, secret, true),
        (None, (Some(id), Some(secret))) => (id.to_string(), secret.to_string(), false),
        (None, _) => {
            return Err(Refusal {
                status: StatusCode::UNAUTHORIZED,
                error: "invalid_client",
                description: "send client credentials (Basic, or client_id and client_secret)"
                    .into(),
                basic: true,
                retry_after: None,
            })
        }
    };
    let receiver = ssf.receivers.get(&client_id);
    let who = Requester {
        tenant: &tenant.name,
        client: receiver.map(|_| client_id.as_str()),
        address,
    };
    // Refused before the secret is looked at: a guess made now tells nothing.
    let (limits, now) = (&ssf.token_failures, Instant::now());
    app.token_failures
        .check(&who, limits, now)
        .map_err(Refusal::too_many)?;
    let receiver = match receiver {
        Some(r) if bool::from(r.client_secret.as_bytes().ct_eq(secret.as_bytes())) => r,
        _ => {
            app.token_failures.failed(&who, limits, now);
            return Err(Refusal::client(is_basic));
        }
    };
    let scopes = granted(field("scope")?, receiver.scopes)?;
    let lifetime = ssf.token_lifetime;
    let access_token = token::issue(
        &app.ssf.token_key,
        (&tenant.name, &client_id),
        &receiver.client_secret,
        scopes,
        now_ms().saturating_add(lifetime.as_millis() as u64),
    );
    let mut response = Json(AccessToken {
        access_token,
        token_type: "Bearer".into(),
        expires_in: lifetime.as_secs(),
        scope: scopes.names(),
    })
    .into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
