//! idem subscribing its `ssf` sources at their transmitters (SSF §§7–8, as a receiver): at start
//! and whenever the configuration in force changes a subscribed source (SIGHUP), one node at a
//! time (the one holding the source's lease in the store, a fencing token raised each time it
//! changes hands) makes the stream match the configuration: it reads the transmitter's
//! metadata, creates the stream when none is recorded for the source, otherwise reads it and
//! PATCHes its `events_requested` or PUTs the whole configuration for a new delivery, and
//! records the stream durably per (tenant, source), written over the version it was read at. A
//! stream whose `iss` is not the transmitter's issuer is recorded and not used. After a create
//! or an update, and every `verify_every`, it asks for a verification with a random `state`,
//! then reads the stream's status. A push stream's `authorization_header` is made here, kept
//! sealed in the record, and checked on each push ([`push_authorization`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use idem_schemas::timefmt::now_ms;
use idem_schemas::Subscription;
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{json, Value};

use crate::http::App;
use crate::source::subscription::{self, Change, Metadata};
use crate::source::upstream::{well_known, Access, UpstreamError};
use crate::source::{Delivery, Source, SourceKind, Subscribe};

/// How often the subscribed sources are compared with the configuration in force.
const RECONCILE: Duration = Duration::from_secs(1);

/// The longest error text recorded.
const MAX_ERROR: usize = 512;

/// Why a subscription step failed.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    /// The transmitter, or its token endpoint.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The store.
    #[error("the store failed: {0}")]
    Store(#[from] idem_actors::StoreError),
    /// What the transmitter gave is not usable.
    #[error("{0}")]
    Unusable(String),
    /// Another node changed the record meanwhile.
    #[error("the record was changed by another node; tried again later")]
    Raced,
}

/// What a source's stream is made to match: its subscription, its event types, its push URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted {
    subscribe: Subscribe,
    events: Vec<String>,
    endpoint_url: String,
}

/// The owner a push stream's sealed `authorization_header` is bound to.
fn owner(tenant: &str, source: &str) -> Vec<u8> {
    format!("subscription\0{tenant}\0{source}").into_bytes()
}

/// A random value of 32 bytes, base64url.
fn random() -> Result<String, SubscribeError> {
    let mut bytes = [0u8; 32];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| SubscribeError::Unusable("no randomness".into()))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// The event types `source` maps exactly (a prefix pattern asks for nothing).
fn events_of(source: &Source) -> Vec<String> {
    source
        .routes
        .iter()
        .filter_map(|r| match &r.event {
            crate::source::Pattern::Exact(e) => Some(e.clone()),
            crate::source::Pattern::Prefix(_) => None,
        })
        .collect()
}

/// Runs until aborted: keeps every subscribed source's stream matching the configuration in
/// force, and verified.
pub async fn run(app: Arc<App>) {
    // What each source's stream was last made to match, whether that succeeded, and when it is
    // verified (or tried) next. Until it succeeds the next attempt is a change still.
    let mut applied: HashMap<(String, String), (Wanted, bool, tokio::time::Instant)> =
        HashMap::new();
    loop {
        let live = app.live.load_full();
        let public_url = live.config.public_url.clone().unwrap_or_default();
        for tenant in live.config.tenants.values() {
            for source in tenant.sources.values() {
                if source.kind != SourceKind::Ssf {
                    continue;
                }
                let Some(subscribe) = source.ssf.as_ref().and_then(|s| s.transmitter.clone())
                else {
                    continue;
                };
                let key = (tenant.name.clone(), source.name.clone());
                let wanted = Wanted {
                    events: events_of(source),
                    endpoint_url: format!(
                        "{public_url}/v1/sources/{}/{}",
                        tenant.name, source.name
                    ),
                    subscribe,
                };
                let now = tokio::time::Instant::now();
                let due = match applied.get(&key) {
                    Some((was, _, next)) => *was != wanted || now >= *next,
                    None => true,
                };
                if !due {
                    continue;
                }
                let job = format!("subscribe:{}/{}", tenant.name, source.name);
                match app.engine.node().turn_at(&job).await {
                    Ok(Some(_)) => {}
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(tenant = %tenant.name, source = %source.name, error = %e, "the subscription lease could not be read");
                        continue;
                    }
                }
                let state = app.sources.of(&tenant.name, source);
                let Some(access) = state.access.clone() else {
                    continue;
                };
                let last = applied.get(&key);
                let changed = last.is_none_or(|(was, _, _)| *was != wanted);
                // A start, a change, or a retry of either may make a deleted stream anew.
                let renew = changed || last.is_some_and(|(_, settled, _)| !settled);
                let outcome = reconcile(
                    &app,
                    &access,
                    &tenant.name,
                    &source.name,
                    &wanted,
                    changed,
                    renew,
                )
                .await;
                let settled = outcome.is_ok();
                let next = match outcome {
                    Ok(()) => now + wanted.subscribe.verify_every,
                    Err(e) => {
                        tracing::warn!(tenant = %tenant.name, source = %source.name, error = %e, "the stream at the transmitter could not be made to match");
                        let _ =
                            record_error(&app, &tenant.name, &source.name, &e.to_string()).await;
                        // Tried again soon, with a growing wait kept simple: the verify interval
                        // is not waited for after a failure.
                        now + Duration::from_secs(5).min(wanted.subscribe.verify_every)
                    }
                };
                applied.insert(key, (wanted, settled, next));
            }
        }
        tokio::time::sleep(RECONCILE).await;
    }
}

/// Records `error` as the subscription's last.
async fn record_error(
    app: &App,
    tenant: &str,
    source: &str,
    error: &str,
) -> Result<(), SubscribeError> {
    let streams = app.engine.streams();
    let mut record = streams
        .subscription(tenant, source)
        .await?
        .unwrap_or_default();
    record.last_error = Some(error.chars().take(MAX_ERROR).collect());
    record.version += 1;
    streams.put_subscription(tenant, source, &record).await?;
    Ok(())
}

/// The transmitter's metadata, its issuer checked.
pub async fn metadata(access: &Access) -> Result<Metadata, SubscribeError> {
    let url = well_known(access.issuer(), "ssf-configuration")?;
    let metadata: Metadata = access.document("the SSF metadata", &url).await?;
    if metadata.issuer != access.issuer() {
        return Err(SubscribeError::Unusable(format!(
            "the SSF metadata names another issuer ({:?})",
            metadata.issuer
        )));
    }
    Ok(metadata)
}

/// `endpoint` of `metadata`, or an error naming it.
pub fn endpoint<'a>(value: &'a Option<String>, name: &str) -> Result<&'a str, SubscribeError> {
    value
        .as_deref()
        .ok_or_else(|| SubscribeError::Unusable(format!("the SSF metadata has no {name}")))
}

/// Sends a JSON request and reads a JSON answer (none for an empty one).
pub async fn call(
    access: &Access,
    what: &'static str,
    method: reqwest::Method,
    url: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), SubscribeError> {
    let bytes = body.map(|b| b.to_string());
    let response = access
        .send(what, |client| {
            let request = client
                .request(method.clone(), url)
                .header("accept", "application/json");
            match &bytes {
                Some(b) => request
                    .header("content-type", "application/json")
                    .body(b.clone()),
                None => request,
            }
        })
        .await?;
    let status = response.status().as_u16();
    let text = response
        .bytes()
        .await
        .map_err(|e| UpstreamError::Unreachable {
            what,
            why: e.without_url().to_string(),
        })?;
    let value = match serde_json::from_slice(&text) {
        Ok(value) => value,
        _ if text.is_empty() => Value::Null,
        // A refusal's body is read only for its error code, if it has one.
        Err(_) if !(200..300).contains(&status) => Value::Null,
        Err(e) => {
            return Err(SubscribeError::Upstream(UpstreamError::Malformed {
                what,
                expected: "JSON",
                why: e.to_string(),
            }))
        }
    };
    Ok((status, value))
}

fn failed(what: &'static str, status: u16) -> SubscribeError {
    SubscribeError::Upstream(UpstreamError::Status {
        what,
        status,
        error: None,
    })
}

/// Makes the stream of `tenant`'s `source` match `wanted`; with `changed` (or when the stream is
/// made anew) a verification is asked for whatever else happens, else on the interval. A
/// stream deleted through idem is made anew only with `renew` (a start, a change, or a retry of
/// either).
async fn reconcile(
    app: &App,
    access: &Access,
    tenant: &str,
    source: &str,
    wanted: &Wanted,
    changed: bool,
    renew: bool,
) -> Result<(), SubscribeError> {
    let metadata = metadata(access).await?;
    let streams_at = endpoint(&metadata.configuration_endpoint, "configuration_endpoint")?;
    let store = app.engine.streams();
    let sealer = store.sealer().clone();
    let mut read = store.subscription(tenant, source).await?;
    let mut record = read.clone().unwrap_or_default();
    let issuer = access.issuer();
    if deleted(&record, issuer) && !renew {
        // Deleted through idem: made anew only at a start or when the source changes.
        return Ok(());
    }
    if record.transmitter != issuer {
        // Another transmitter's stream is not this one's.
        record.stream_id = None;
        record.authorization = None;
    }
    // A push stream's credential: the one recorded, else a new one.
    let authorization = match (&record.authorization, wanted.subscribe.delivery) {
        (Some(sealed), Delivery::Push) => String::from_utf8(
            sealer
                .open(&owner(tenant, source), sealed)
                .map_err(|e| SubscribeError::Unusable(e.to_string()))?,
        )
        .map_err(|_| SubscribeError::Unusable("a sealed credential that is not text".into()))?,
        (None, Delivery::Push) => format!("Bearer {}", random()?),
        (_, Delivery::Poll) => String::new(),
    };
    let delivery = subscription::delivery(
        wanted.subscribe.delivery,
        &wanted.endpoint_url,
        &authorization,
    );
    // A new push credential is recorded before the transmitter is given it: a transmitter may
    // push (a verification, say) as soon as it has made or replaced the stream, before it
    // answers idem, and that push must already be taken.
    if wanted.subscribe.delivery == Delivery::Push && record.authorization.is_none() {
        record.authorization = Some(
            sealer
                .seal(&owner(tenant, source), authorization.as_bytes())
                .map_err(|e| SubscribeError::Unusable(e.to_string()))?,
        );
        record = write(app, tenant, source, read.as_ref(), record).await?;
        read = Some(record.clone());
    }
    let mut stream = match &record.stream_id {
        Some(id) => read_stream(access, &metadata, id).await?,
        None => None,
    };
    let mut made = false;
    let description = format!("idem: {tenant}/{source}");
    if stream.is_none() {
        // A stream made before a crash that came before its record: found by its description
        // and used, so a source has one stream whatever the crash.
        stream = made_earlier(access, streams_at, &description).await;
        made = stream.is_some();
    }
    // An adopted push stream's authorization_header was never recorded: it is given anew.
    let unknown_credential = made && wanted.subscribe.delivery == Delivery::Push;
    match &stream {
        None => {
            let body = json!({
                "delivery": delivery,
                "events_requested": wanted.events,
                "description": description,
            });
            let (status, answer) = call(
                access,
                "the stream endpoint",
                reqwest::Method::POST,
                streams_at,
                Some(&body),
            )
            .await?;
            if status != 201 && status != 200 {
                return Err(failed("the stream endpoint", status));
            }
            tracing::info!(tenant, source, stream_id = %answer["stream_id"], "a stream was made at the transmitter");
            idem_actors::failpoint::hit("subscribe.after_create");
            stream = Some(answer);
            made = true;
        }
        Some(had) => {
            let id = had["stream_id"]
                .as_str()
                .map(str::to_string)
                .or_else(|| record.stream_id.clone())
                .unwrap_or_default();
            let change = match unknown_credential {
                true => Change::Replace,
                false => subscription::change(had, &delivery, &wanted.events),
            };
            let (method, body) = match change {
                Change::Keep => (None, Value::Null),
                Change::Events => (
                    Some(reqwest::Method::PATCH),
                    json!({"stream_id": id, "events_requested": wanted.events}),
                ),
                Change::Replace => (
                    Some(reqwest::Method::PUT),
                    json!({
                        "stream_id": id, "delivery": delivery,
                        "events_requested": wanted.events,
                        "description": description,
                    }),
                ),
            };
            if let Some(method) = method {
                let (status, answer) = call(
                    access,
                    "the stream endpoint",
                    method,
                    streams_at,
                    Some(&body),
                )
                .await?;
                if status != 200 {
                    return Err(failed("the stream endpoint", status));
                }
                tracing::info!(tenant, source, stream_id = %id, ?change, "the stream at the transmitter was changed");
                stream = Some(answer);
                made = true;
            }
        }
    }
    let stream = stream.unwrap_or_default();
    let Some(id) = stream["stream_id"].as_str().map(str::to_string) else {
        return Err(SubscribeError::Unusable(
            "the transmitter's stream has no stream_id".into(),
        ));
    };
    record.transmitter = issuer.to_string();
    record.stream_id = Some(id.clone());
    record.delivery = match wanted.subscribe.delivery {
        Delivery::Push => "push",
        Delivery::Poll => "poll",
    }
    .to_string();
    record.events_requested = wanted.events.clone();
    record.events_delivered = subscription::events_delivered(&stream);
    record.poll_url = match wanted.subscribe.delivery {
        Delivery::Poll => stream["delivery"]["endpoint_url"]
            .as_str()
            .map(str::to_string),
        Delivery::Push => None,
    };
    // A push stream's credential was recorded above; a poll stream has none.
    if wanted.subscribe.delivery == Delivery::Poll {
        record.authorization = None;
    }
    let iss = stream["iss"].as_str().unwrap_or_default();
    let usable = iss == issuer;
    record.last_error = (!usable).then(|| {
        format!("the stream's iss {iss:?} is not the transmitter's issuer: the stream is not used")
    });
    record.iss = Some(iss.to_string());
    record = write(app, tenant, source, read.as_ref(), record).await?;
    if !usable {
        return Ok(());
    }
    // After a create or an update, on the interval, and for a stream never verified.
    if made || !changed || record.verified_at_ms.is_none() {
        record = verify(app, access, &metadata, tenant, source, record).await?;
    }
    read_status(app, access, &metadata, tenant, source, record).await?;
    Ok(())
}

/// The receiver's stream at the transmitter described as `description` (idem's own words for
/// a source's stream), read from the list of its streams (SSF §8.1.1.2 without `stream_id`);
/// none when there is none, or when the transmitter does not list them.
async fn made_earlier(access: &Access, streams_at: &str, description: &str) -> Option<Value> {
    let (status, body) = call(
        access,
        "the stream endpoint",
        reqwest::Method::GET,
        streams_at,
        None,
    )
    .await
    .ok()?;
    if status != 200 {
        return None;
    }
    let streams = match body {
        Value::Array(streams) => streams,
        one @ Value::Object(_) => vec![one],
        _ => return None,
    };
    streams
        .into_iter()
        .find(|s| s["description"] == description && s["stream_id"].is_string())
}

/// Clears the stream from `record`, as its deletion through idem leaves it: the record stays
/// at its transmitter with no stream, which [`deleted`] tells apart, so that no node uses the
/// stream again and none makes a new one until its next start or a change of the source.
pub fn forget(record: &mut Subscription) {
    *record = Subscription {
        version: record.version,
        transmitter: record.transmitter.clone(),
        ..Subscription::default()
    };
}

/// Whether `record` is a stream at `issuer` deleted through idem ([`forget`]): only a
/// deletion leaves a record at its transmitter without a stream.
pub fn deleted(record: &Subscription, issuer: &str) -> bool {
    record.stream_id.is_none() && record.transmitter == issuer
}

/// Stream `id` as the transmitter of `metadata` answers it; none if it has no such stream.
pub async fn read_stream(
    access: &Access,
    metadata: &Metadata,
    id: &str,
) -> Result<Option<Value>, SubscribeError> {
    let at = endpoint(&metadata.configuration_endpoint, "configuration_endpoint")?;
    let url = with_query(at, "stream_id", id);
    let what = "the stream endpoint";
    let (status, body) = call(access, what, reqwest::Method::GET, &url, None).await?;
    match status {
        200 => Ok(Some(body)),
        404 => Ok(None),
        other => Err(failed(what, other)),
    }
}

/// `url` with `name=value` added to its query.
pub fn with_query(url: &str, name: &str, value: &str) -> String {
    let encoded: String = url_encode(value);
    let joint = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joint}{name}={encoded}")
}

fn url_encode(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, crate::source::upstream::FORM).to_string()
}

/// Writes `record` over the version `read` was at; the record as written.
async fn write(
    app: &App,
    tenant: &str,
    source: &str,
    read: Option<&Subscription>,
    mut record: Subscription,
) -> Result<Subscription, SubscribeError> {
    record.version = read.map_or(0, |r| r.version) + 1;
    if app
        .engine
        .streams()
        .put_subscription(tenant, source, &record)
        .await?
    {
        Ok(record)
    } else {
        Err(SubscribeError::Raced)
    }
}

/// Asks for a verification of the recorded stream with a new random `state`, recorded first.
pub async fn verify(
    app: &App,
    access: &Access,
    metadata: &Metadata,
    tenant: &str,
    source: &str,
    mut record: Subscription,
) -> Result<Subscription, SubscribeError> {
    let at = endpoint(&metadata.verification_endpoint, "verification_endpoint")?;
    let id = record.stream_id.clone().unwrap_or_default();
    let read = record.clone();
    let state = random()?;
    record.verify_state = Some(state.clone());
    record.verify_asked_ms = Some(now_ms());
    // The state is durable before it is asked for: the SET may come to any node at once.
    let record = write(app, tenant, source, Some(&read), record).await?;
    let body = json!({"stream_id": id, "state": state});
    let (status, _) = call(
        access,
        "the verification endpoint",
        reqwest::Method::POST,
        at,
        Some(&body),
    )
    .await?;
    if !(200..300).contains(&status) {
        return Err(failed("the verification endpoint", status));
    }
    Ok(record)
}

/// Reads the recorded stream's status from the transmitter and records it.
pub async fn read_status(
    app: &App,
    access: &Access,
    metadata: &Metadata,
    tenant: &str,
    source: &str,
    record: Subscription,
) -> Result<Subscription, SubscribeError> {
    let at = endpoint(&metadata.status_endpoint, "status_endpoint")?;
    let id = record.stream_id.clone().unwrap_or_default();
    let url = with_query(at, "stream_id", &id);
    let (status, body) = call(
        access,
        "the status endpoint",
        reqwest::Method::GET,
        &url,
        None,
    )
    .await?;
    if status != 200 {
        return Err(failed("the status endpoint", status));
    }
    // Read again: a verification SET may have been recorded meanwhile.
    let streams = app.engine.streams();
    let mut now = streams
        .subscription(tenant, source)
        .await?
        .unwrap_or(record);
    let read = now.clone();
    now.status = body["status"].as_str().map(str::to_string);
    now.reason = body["reason"].as_str().map(str::to_string);
    write(app, tenant, source, Some(&read), now).await
}

/// Whether a push's `authorization` is the one the stream of `tenant`'s `source` was made
/// with; none is recorded: `None` (the source is not pushed to through a subscription yet).
pub async fn push_authorization(
    app: &App,
    tenant: &str,
    source: &str,
    authorization: Option<&str>,
) -> Result<bool, idem_actors::StoreError> {
    let streams = app.engine.streams();
    let Some(record) = streams.subscription(tenant, source).await? else {
        return Ok(false);
    };
    let Some(sealed) = record.authorization else {
        return Ok(false);
    };
    let Ok(expected) = streams.sealer().open(&owner(tenant, source), &sealed) else {
        return Ok(false);
    };
    let given = authorization.unwrap_or_default().as_bytes();
    Ok(subtle::ConstantTimeEq::ct_eq(given, expected.as_slice()).into())
}
