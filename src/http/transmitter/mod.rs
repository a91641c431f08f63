//! The Shared Signals transmitter's HTTP side (SSF 1.0): a tenant's metadata and JWK Set
//! (`discovery`), the OAuth token endpoint its receivers authenticate at (`token`), and stream
//! management and verification (`streams`), and polling a poll stream (`poll`), each call of which carries a token of one receiver and sees that
//! receiver's streams only. A tenant without `[tenants.<t>.ssf]` has none of these (404).

pub mod discovery;
pub mod poll;
pub mod streams;
pub mod token;
pub mod token_limit;

use std::sync::Arc;

use axum::http::HeaderMap;
use idem_actors::set::{self, SetSigner};
use idem_schemas::timefmt::now_ms;

use crate::config::Tenant;
use crate::http::problem::{ApiError, Kind};
use crate::http::{App, Live};
use crate::transmitter::token::Scopes;
use crate::transmitter::Transmitter;

/// The tenant the path names and its transmitter, or 404.
fn find<'l>(live: &'l Live, tenant: &str) -> Result<(&'l Tenant, &'l Transmitter), ApiError> {
    live.config
        .tenants
        .get(tenant)
        .and_then(|t| t.ssf.as_ref().map(|ssf| (t, ssf)))
        .ok_or_else(|| ApiError::new(Kind::NotFound, "no Shared Signals transmitter here"))
}

/// The tenant's issuer: `{base}/ssf/{tenant}`.
fn issuer(app: &App, live: &Live, tenant: &str) -> String {
    format!("{}/ssf/{tenant}", app.base_url(live))
}

/// `tenant`'s transmitter as its SETs are made with it, if it is one: made once per
/// configuration (the first time a signal or a stream asks for it).
pub fn of(app: &App, live: &Live, tenant: &str) -> Option<Arc<set::SetIssuer>> {
    let made = live.transmitters.get_or_init(|| {
        let tenants = live.config.tenants.values();
        let signing = tenants.filter_map(|tenant| Some((tenant, tenant.ssf.as_ref()?)));
        signing
            .filter_map(|(tenant, ssf)| {
                let signer: Arc<dyn SetSigner> = ssf.keys.first()?.clone();
                let transmitter = set::SetIssuer {
                    issuer: issuer(app, live, &tenant.name),
                    signer,
                    audiences: ssf
                        .receivers
                        .iter()
                        .map(|(id, r)| (id.clone(), r.audience.clone()))
                        .collect(),
                };
                Some((tenant.name.clone(), Arc::new(transmitter)))
            })
            .collect()
    });
    made.get(tenant).cloned()
}

/// The scope an operation on the stream management API needs: reading (`GET`: a stream, the
/// streams, a status) and polling a poll stream need `ssf.read`; every other request is a write
/// and needs `ssf.manage`: creating, updating, replacing and deleting a stream, changing its
/// status, adding and removing subjects, and asking for a verification (which makes the
/// transmitter send, and counts against the stream's interval).
pub fn needed(method: &axum::http::Method, path: &str) -> Scopes {
    let read = method == axum::http::Method::GET || path.ends_with("/poll");
    Scopes {
        read,
        manage: !read,
    }
}

/// The receiver whose access token the `Authorization: Bearer` header carries, if that token
/// has the scopes `needed` (among those its receiver is configured with now): 401 with
/// `WWW-Authenticate: Bearer` without one, `error="invalid_token"` for one not valid or
/// expired; 403 `error="insufficient_scope"` without the scope; 400 `error="invalid_request"`
/// for a token in the query string (RFC 6750 §2.3, which idem does not take).
fn receiver(
    app: &App,
    tenant: &Tenant,
    ssf: &Transmitter,
    (headers, query): (&HeaderMap, Option<&str>),
    needed: Scopes,
) -> Result<String, ApiError> {
    let in_query = query.is_some_and(|q| {
        q.split('&')
            .any(|pair| pair.split('=').next() == Some("access_token"))
    });
    if in_query {
        return Err(ApiError::new(
            Kind::InvalidQuery,
            "send the access token in the Authorization header, not the query string",
        )
        .challenge("Bearer error=\"invalid_request\""));
    }
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .ok_or_else(|| {
            ApiError::new(
                Kind::Unauthorized,
                format!(
                    "send Authorization: Bearer <an access token from POST /ssf/{}/token>",
                    tenant.name
                ),
            )
        })?;
    let (receiver, granted) = crate::transmitter::token::check(
        &app.ssf.token_key,
        token,
        &tenant.name,
        now_ms(),
        |receiver| {
            ssf.receivers
                .get(receiver)
                .map(|r| r.client_secret.as_str())
        },
    )
    .map_err(|e| {
        ApiError::new(Kind::Unauthorized, e.to_string()).challenge(format!(
            "Bearer error=\"invalid_token\", error_description=\"{e}\""
        ))
    })?;
    let configured = ssf
        .receivers
        .get(&receiver)
        .map_or(Scopes::ALL, |r| r.scopes);
    if !needed.within(granted.and(configured)) {
        let scope = needed.names();
        return Err(ApiError::new(
            Kind::InsufficientScope,
            format!("this request needs an access token with scope {scope}"),
        )
        .challenge(format!(
            "Bearer error=\"insufficient_scope\", scope=\"{scope}\""
        )));
    }
    Ok(receiver)
}
