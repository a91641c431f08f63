//! The OpenAPI 3.1 document served at `GET /openapi.json`: every endpoint with its headers,
//! bodies and problem responses. Body schemas come from the same `ToSchema` derives as the JSON
//! Schema files in `schemas/json/`, and every problem `type` URI is listed from `Kind::ALL`, so
//! the document cannot drift from the code. The functions below only carry the path docs.
#![allow(dead_code)]

use idem_schemas::{
    AccessToken, ActionResult, ActionStatus, AttemptView, AuthorizationScheme, CallbackData,
    CallbackEnvelope, DeadReason, DecidedAction, DecisionPage, DecisionResponse, DecisionView,
    DeliveryPage, DeliveryStatus, DeliveryView, EndpointList, EndpointState, EndpointView,
    NamedSource, OAuthError, OktaVerification, PlaybookEvaluation, PollStatus, Problem,
    RedeliverRequest, Redelivered, RuleError, SetError, SignalRequest, SourceList, SourceReceipt,
    SourceStatus, StreamConfig, StreamDelivery, StreamStatus, StreamStatusBody, SubjectChange,
    SubscriptionChange, SubscriptionStatus, TenantStats, TransmitterMetadata, Verdict,
    VerificationStatus,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ObjectBuilder, Type};
use utoipa::{Modify, OpenApi};

use crate::http::problem::Kind;

#[utoipa::path(
    post,
    path = "/v1/signals",
    tag = "signals",
    summary = "Post a signal; one key makes one decision",
    description = "Checks run in order: key syntax, content type, size, JSON shape (400/413/415); API key, signature and timestamp (401); playbook (400); then the claim. A retry of a completed key replays the stored status and body byte for byte with `Idempotent-Replayed: true`. Payloads compare by their RFC 8785 (JCS) form; a body naming a member twice is refused. A signed request without Idempotency-Key is claimed under its webhook-id. With `Prefer: wait=N`, a request whose key is in flight waits up to N seconds (capped by idempotency.max_wait) for the first request's answer and gets it as a replay with `Preference-Applied`; still in flight after the wait, 409. A playbook with once_per_subject answers further signals for a subject within its window with the first decision's response (`Idem-Deduplicated: subject`).",
    request_body(content = SignalRequest, content_type = "application/json"),
    params(
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, pattern = r#"^([\x21\x23-\x7E][\x21-\x7E]{0,254}|"[\x21\x23-\x5B\x5D-\x7E]{1,255}")$"#, description = "1 to 255 visible ASCII characters, bare or as a quoted structured-field string"),
        ("Prefer" = Option<String>, Header, description = "RFC 7240; `wait=N`: wait up to N seconds (capped by idempotency.max_wait) for an in-flight key's answer instead of a 409"),
        ("webhook-id" = Option<String>, Header, description = "Standard Webhooks id; required when the tenant has a signing_secret; must equal Idempotency-Key when both are sent; without Idempotency-Key, the request is claimed under it"),
        ("webhook-timestamp" = Option<String>, Header, description = "Unix seconds; required when the tenant has a signing_secret"),
        ("webhook-signature" = Option<String>, Header, description = "Space-separated `v1,<base64>` HMAC-SHA-256 signatures; required when the tenant has a signing_secret"),
        ("traceparent" = Option<String>, Header, description = "W3C Trace Context: with tracing on, the request's span is its child (an invalid one is ignored)"),
        ("tracestate" = Option<String>, Header, description = "W3C Trace Context vendor data, kept with the request's span (not stored)"),
    ),
    responses(
        (status = 201, description = "First processing, or a replay (with Idempotent-Replayed: true)", body = DecisionResponse,
            headers(
                ("Idempotent-Replayed" = String, description = "`true` on a replay"),
                ("traceresponse" = String, description = "With tracing on: the span the decision was made in (`00-<trace id>-<span id>-<flags>`); a replay names the first request's"),
                ("Preference-Applied" = String, description = "`wait=N`, N the wait applied, on a request answered after waiting for its key"),
                ("Idem-Deduplicated" = String, description = "`subject`: the first decision for this subject within its playbook's once_per_subject window"),
            )),
        (status = 400, description = "invalid-idempotency-key, repeated-header, malformed-json, invalid-signal, webhook-id-mismatch or unknown-signal-type", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized, signature-required, invalid-signature or stale-timestamp", body = Problem, content_type = "application/problem+json",
            headers(("WWW-Authenticate" = String, description = "`Bearer` when the API key is missing or wrong"))),
        (status = 409, description = "key-in-flight: the key's first request is still running (after the wait, with Prefer: wait; at once beyond idempotency.max_waiters)", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = String, description = "Seconds to wait: 2"))),
        (status = 413, description = "payload-too-large: the body is over the largest taken", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type: not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "key-reused: the key was used with another payload", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "internal", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "unavailable", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn post_signals() {}

#[utoipa::path(
    get,
    path = "/v1/decisions/{id}",
    tag = "decisions",
    summary = "A decision, with each action's current delivery status",
    params(("id" = String, Path, description = "The decision id (`decision_id` of the 201 body)")),
    responses(
        (status = 200, body = DecisionView),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such decision for this tenant, or past decisions.retention", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn get_decision() {}

#[utoipa::path(
    get,
    path = "/v1/decisions",
    tag = "decisions",
    summary = "A subject's decisions, or the tenant's, newest first",
    description = "The subject is digested for the lookup, as it was when the signals were decided; it is never stored. Without `subject`, the tenant's newest decisions. Keyless decisions are listed too, for decisions.retention.",
    params(
        ("subject" = Option<String>, Query, min_length = 1, description = "The subject as the signals carried it (phone number, account id); leave it out for all of the tenant's decisions"),
        ("subject_id" = Option<String>, Query, description = "In place of `subject`: an RFC 9493 subject identifier object as JSON (emails compare lower-cased, members in any order), as SSF sources name subjects"),
        ("type" = Option<String>, Query, description = "Only decisions of this signal type"),
        ("after" = Option<String>, Query, pattern = r"^dec_.+$", description = "The `next_after` of the previous page"),
        ("limit" = Option<u32>, Query, minimum = 1, description = "Page size (its bounds and default are the handler's)"),
    ),
    responses(
        (status = 200, body = DecisionPage),
        (status = 400, description = "invalid-query", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn list_decisions() {}

#[utoipa::path(
    post,
    path = "/v1/playbooks/{type}/evaluate",
    tag = "decisions",
    summary = "What the playbook would decide for a signal now (a dry run)",
    description = "Evaluates the tenant's playbook for `type` on the signal in the body, as a decision would now: its rules in order over the signal and the subject's kept decisions, the first whose `when` is true deciding, the playbook's own decision otherwise. It claims nothing, stores nothing, counts nothing and sends nothing. The body is a signal as `POST /v1/signals` takes it, of the path's type.",
    params(("type" = String, Path, description = "The signal type whose playbook is evaluated")),
    request_body(content = SignalRequest, content_type = "application/json"),
    responses(
        (status = 200, body = PlaybookEvaluation),
        (status = 400, description = "malformed-json, invalid-signal (also a body of another type) or unknown-signal-type", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload-too-large", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type: not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "internal: the subject's history could not be read", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn evaluate_playbook() {}

#[utoipa::path(
    get,
    path = "/v1/deliveries/{id}",
    tag = "deliveries",
    summary = "A delivery's status and attempt log",
    params(("id" = String, Path, description = "The delivery id (its webhook-id)")),
    responses(
        (status = 200, body = DeliveryView),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such delivery for this tenant", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn get_delivery() {}

#[utoipa::path(
    get,
    path = "/v1/deliveries",
    tag = "deliveries",
    summary = "A page of the tenant's deliveries",
    params(
        ("status" = Option<DeliveryStatus>, Query, description = "Only deliveries with this status"),
        ("after" = Option<String>, Query, pattern = r"^(queued|delivered|failed|dead|dropped):.+$", description = "The `next_after` of the previous page"),
        ("limit" = Option<u32>, Query, minimum = 1, description = "Page size (its bounds and default are the handler's)"),
    ),
    responses(
        (status = 200, body = DeliveryPage),
        (status = 400, description = "invalid-query", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn list_deliveries() {}

#[utoipa::path(
    post,
    path = "/v1/deliveries/{id}/redeliver",
    tag = "deliveries",
    summary = "A new series of attempts for a failed or dead delivery (same webhook-id, same bytes)",
    params(("id" = String, Path, description = "The delivery id")),
    responses(
        (status = 202, body = DeliveryView),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "not-redeliverable: the delivery is queued or delivered, or a SET whose delivery ended (its bytes are erased then)", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "rate-limited: over 10 redelivery requests per second", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn redeliver() {}

#[utoipa::path(
    post,
    path = "/v1/deliveries/redeliver",
    tag = "deliveries",
    summary = "A new series of attempts for every failed or dead delivery a filter matches",
    description = "Every matching delivery gets a new series of attempts, as the single redeliver gives one; the retry worker makes them, paced by each endpoint's limit of attempts at once. `since`/`until` compare with the delivery's creation time. With an `Idempotency-Key`, a retry of the same request redelivers nothing again and gets the first answer (`Idempotent-Replayed: true`); the same key with another filter is 422. Redelivery requests, single or bulk, are limited to 10 per second per tenant.",
    request_body(content = RedeliverRequest, content_type = "application/json"),
    params(("Idempotency-Key" = Option<String>, Header, min_length = 1, pattern = r#"^([\x21\x23-\x7E][\x21-\x7E]{0,254}|"[\x21\x23-\x5B\x5D-\x7E]{1,255}")$"#, description = "Makes a retried request redeliver nothing twice: 1 to 255 visible ASCII characters, bare or quoted")),
    responses(
        (status = 202, body = Redelivered, headers(("Idempotent-Replayed" = String, description = "`true` on a replay"))),
        (status = 400, description = "invalid-filter, malformed-json or invalid-idempotency-key", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "key-in-flight: a request with this key is still running", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "key-reused: the key was used with another filter", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "rate-limited: over 10 redelivery requests per second", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn redeliver_matching() {}

#[utoipa::path(
    get,
    path = "/v1/endpoints",
    tag = "deliveries",
    summary = "The tenant's endpoints (action URLs) and their health",
    description = "An endpoint that fails `delivery.breaker_threshold` times in a row (5xx, 429, network error, deadline) is `open`: no attempt goes to it, not even inline, and its queued deliveries wait without using up their attempts. After `delivery.breaker_cooldown` one of them probes it (`half_open`): success closes it, failure opens it again. A 2xx or a terminal answer (4xx other than 429, 3xx) resets the count.",
    responses(
        (status = 200, body = EndpointList),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn list_endpoints() {}

#[utoipa::path(
    get,
    path = "/v1/stats",
    tag = "console",
    summary = "The tenant's live figures",
    description = "`signals` (authenticated and naming a playbook, or a source event mapped to one; duplicates included) and `decisions` are counted by the answering node since `since`, when it started; on several nodes each counts what it took. `queued` and `dead` are the store's, shared by every node, counted up to `counted_to`.",
    responses(
        (status = 200, body = TenantStats),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn stats() {}

#[utoipa::path(
    get,
    path = "/console",
    tag = "console",
    summary = "The web console",
    description = "A page served from assets in the binary. It signs in with the tenant's API key, kept in the tab's sessionStorage and sent to this API as the Bearer token, and calls nothing but this API. Served with a Content-Security-Policy allowing only this origin and no inline script or style.",
    responses((status = 200, description = "The page", body = String, content_type = "text/html")),
)]
fn console() {}

#[utoipa::path(
    get,
    path = "/console/{asset}",
    tag = "console",
    summary = "The console's script, style sheet and icon",
    params(("asset" = String, Path, description = "`app.js`, `app.css` or `icon.svg`")),
    responses(
        (status = 200, description = "The asset", content(
            (String = "text/javascript"), (String = "text/css"), (String = "image/svg+xml")
        )),
        (status = 404, description = "not-found: no such asset", body = Problem, content_type = "application/problem+json"),
    ),
)]
fn console_asset() {}

#[utoipa::path(
    post,
    path = "/v1/sources/{tenant}/{source}",
    tag = "sources",
    summary = "A sender's delivery, taken as the sender sends it",
    description = "No API key: the delivery is authenticated by its source's kind, over the raw bytes, before anything is parsed or stored: `stripe` Stripe-Signature (t=…,v1=…, HMAC-SHA-256 of `t.body`, t within signatures.tolerance); `github` X-Hub-Signature-256; `standard` webhook-id, webhook-timestamp, webhook-signature; `okta` the configured Authorization value; `auth0` and `cloudevents` Authorization: Bearer <secret>; `twilio` X-Twilio-Signature over public_url and the path (never the request's Host), whose bodySHA256 is the body's SHA-256; `ssf` a Security Event Token (application/secevent+jwt) signed with a key of the transmitter's JWK Set, chosen by kid, with an allowed public-key alg that fits the key (and the configured Authorization value, if any). Each event (a batch for okta, auth0, twilio and batched CloudEvents; each of a SET's events) becomes one signal claimed under the sender's event id (okta `uuid`, auth0 `log_id`, twilio the CloudEvent `id`, stripe `id`, github the digest of its signed body (X-GitHub-Delivery is its event_id), standard webhook-id, cloudevents its `source` and `id`, ssf the SET's `jti`): a sender's retry is a duplicate, with no second decision or callback. The signal type comes from the source's `map` by event type; an event without a type, or of an unmapped one, is ignored; one without an id, with an id or type over 256 bytes, or without a subject at the map's JSON pointer is refused; both are acknowledged. The 200 leaves once every accepted event's claim and decision are durable; the callbacks follow. An `ssf` source answers RFC 8935's way: 202 with no body once every event of the SET is claimed (for a first SET and a repeated one alike), 400 `{err, description}` for a refused SET, with nothing claimed. A caller without valid credentials gets one answer from every source and from no source (401 source-unauthenticated; for a push of application/secevent+jwt, 400 authentication_failed); a header a scheme or an event id is read from, sent twice, is 400 repeated-header. A source signal's metadata is {source, event_id, event_type}; the body is never stored.",
    params(
        ("tenant" = String, Path, description = "The tenant"),
        ("source" = String, Path, description = "The source's name under the tenant's `sources`"),
    ),
    request_body(description = "The sender's delivery: JSON of at most 1 MiB (auth0 and twilio: an array, or one object alone; cloudevents: one structured event, a batch, or binary mode's data with ce-* headers), or for `ssf` a compact JWS of at most 64 KiB", content(
        (Object = "application/json"),
        (Object = "application/cloudevents+json"),
        (Object = "application/cloudevents-batch+json"),
        (String = "application/secevent+jwt"),
    )),
    responses(
        (status = 200, body = SourceReceipt),
        (status = 202, description = "ssf: every event of the SET is claimed, now or before"),
        (status = 400, description = "malformed-json or invalid-events: not the sender's delivery shape; ssf: RFC 8935's error", content(
            (Problem = "application/problem+json"),
            (SetError = "application/json"),
        )),
        (status = 401, description = "source-unauthenticated: not authenticated by the source's scheme, or no such tenant or source (one answer for both); stale-timestamp: the signature matched, its time is off", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "request-timeout", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload-too-large: the body is over 1 MiB (ssf: 64 KiB), or a batch of CloudEvents holds over 100 events", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "internal: an event could not be stored; send the delivery again", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "unavailable: the store, or (ssf) the transmitter's JWK Set; send it again", body = Problem, content_type = "application/problem+json"),
    ),
)]
fn post_source() {}

#[utoipa::path(
    get,
    path = "/v1/sources/{tenant}/{source}",
    tag = "sources",
    summary = "Okta's one-time verification of an event hook",
    params(
        ("tenant" = String, Path, description = "The tenant"),
        ("source" = String, Path, description = "An okta source's name"),
        ("X-Okta-Verification-Challenge" = String, Header, description = "The challenge, answered back"),
        ("Authorization" = String, Header, description = "The value configured on the hook (the source's secret)"),
    ),
    responses(
        (status = 200, body = OktaVerification),
        (status = 400, description = "invalid-events: no challenge", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "source-unauthenticated: not the configured authorization, or no such okta source (one answer for no source, a source of another kind, and a wrong credential)", body = Problem, content_type = "application/problem+json"),
    ),
)]
fn get_source() {}

#[utoipa::path(
    get,
    path = "/v1/sources/{tenant}/{source}/status",
    tag = "sources",
    summary = "What became of a source's events on this node, and what an SSF transmitter last announced",
    params(
        ("tenant" = String, Path, description = "The tenant (the caller's own)"),
        ("source" = String, Path, description = "The source's name"),
    ),
    responses(
        (status = 200, body = SourceStatus),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such source for this tenant", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn source_status() {}

#[utoipa::path(
    post,
    path = "/v1/sources/{tenant}/{source}/subscription",
    tag = "sources",
    summary = "Ask the transmitter to change the status of a subscribed source's stream (SSF §8.1.2.2)",
    description = "For an `ssf` source with `transmitter`: idem calls the transmitter's status endpoint with the recorded `stream_id` and the source's token (renewed once on a 401), answers the status the transmitter gave (read back from its status endpoint when its answer carries none), and records it: the source's status shows it as `subscription.status`.",
    params(
        ("tenant" = String, Path, description = "The tenant (the caller's own)"),
        ("source" = String, Path, description = "A subscribed ssf source's name"),
    ),
    request_body(content = SubscriptionChange, content_type = "application/json"),
    responses(
        (status = 200, description = "The stream's status as the transmitter answered it", body = StreamStatusBody),
        (status = 400, description = "invalid-stream (not enabled, paused or disabled; an unknown member; a reason over 1024 bytes; a member sent twice) or malformed-json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such source for this tenant", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "not-subscribed: the source has no transmitter; no-stream: no stream recorded (not made yet, or deleted)", body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "transmitter-failed: the transmitter could not be reached or answered an error, named in the detail", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "unavailable: the store", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn set_subscription_status() {}

#[utoipa::path(
    delete,
    path = "/v1/sources/{tenant}/{source}/subscription",
    tag = "sources",
    summary = "Delete a subscribed source's stream at its transmitter (SSF §8.1.1.5)",
    description = "Deletes the recorded stream at the transmitter (one it no longer has counts as deleted) and clears it from the record: no node polls, verifies or takes pushes for it from then on, and none makes a new one while it runs. The next start of a node, or a change of the source's configuration, makes a new stream. Removing the source from the configuration deletes nothing.",
    params(
        ("tenant" = String, Path, description = "The tenant (the caller's own)"),
        ("source" = String, Path, description = "A subscribed ssf source's name"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such source for this tenant", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "not-subscribed or no-stream", body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "transmitter-failed", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "unavailable: the store", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn delete_subscription() {}

#[utoipa::path(
    post,
    path = "/v1/sources/{tenant}/{source}/subjects",
    tag = "sources",
    summary = "Add a subject to, or remove one from, a subscribed source's stream (SSF §§8.1.3.2–8.1.3.3)",
    description = "Calls the transmitter's add or remove subject endpoint with the recorded `stream_id` and answers with its status code, with no body.",
    params(
        ("tenant" = String, Path, description = "The tenant (the caller's own)"),
        ("source" = String, Path, description = "A subscribed ssf source's name"),
    ),
    request_body(content = SubjectChange, content_type = "application/json"),
    responses(
        (status = 200, description = "Added (the transmitter's 200)"),
        (status = 204, description = "Removed (the transmitter's 204)"),
        (status = 400, description = "invalid-stream (an action other than add or remove; a subject that is not an object with its format; verified with remove; an unknown member) or malformed-json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such source for this tenant", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "not-subscribed or no-stream", body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "transmitter-failed", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "unavailable: the store", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn change_subjects() {}

#[utoipa::path(
    get,
    path = "/v1/sources",
    tag = "sources",
    summary = "The tenant's sources, each with its status on this node and, when subscribed at its transmitter, its stream",
    responses(
        (status = 200, body = SourceList),
        (status = 401, description = "unauthorized", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "the store cannot be reached", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
fn list_sources() {}

#[utoipa::path(
    get,
    path = "/.well-known/ssf-configuration/ssf/{tenant}",
    tag = "shared signals out",
    summary = "The tenant's Shared Signals transmitter metadata (SSF §7.1)",
    description = "Only for a tenant with `[tenants.<t>.ssf]`. Its issuer is `{public_url}/ssf/{tenant}` (`public_url` defaults to `http://{listen}`).",
    params(("tenant" = String, Path, description = "The tenant")),
    responses(
        (status = 200, body = TransmitterMetadata),
        (status = 404, description = "not-found: no such tenant, or it is not a transmitter", body = Problem, content_type = "application/problem+json"),
    ),
)]
fn ssf_metadata() {}

#[utoipa::path(
    get,
    path = "/ssf/{tenant}/jwks",
    tag = "shared signals out",
    summary = "The public keys the tenant's SETs are signed with",
    description = "Every configured key as a public JWK with `kid` (its RFC 7638 thumbprint), `alg` (RS256 or ES256) and `use: sig`; the first signs. Rotate by adding a key second, waiting for receivers to fetch the set, moving it first, then removing the old one.",
    params(("tenant" = String, Path, description = "The tenant")),
    responses(
        (status = 200, description = "A JWK Set", body = Object, content_type = "application/jwk-set+json"),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
    ),
)]
fn ssf_jwks() {}

#[utoipa::path(
    post,
    path = "/ssf/{tenant}/token",
    tag = "shared signals out",
    summary = "An access token for a receiver (OAuth 2.0 client credentials)",
    description = "RFC 6749 §4.4: `grant_type=client_credentials`, the receiver authenticated by `client_secret_basic` or `client_secret_post` (not both) with its `client_id` (its name under `[tenants.<t>.ssf.receivers]`) and `client_secret`. The token is good on every node sharing `key_secret` for `token_lifetime` (default 1 hour), and no longer once the receiver's secret changes. It is granted the `scope` asked for (`ssf.read`, `ssf.manage`, space-separated), each among the receiver's `scopes`, or all the receiver's `scopes` when none is asked for; the answer's `scope` says which. Failed requests (an unknown client, a wrong secret) are limited per receiver and per address by `token_failures`; a request with the right secret takes nothing from them.",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body(description = "`grant_type=client_credentials`, optionally `scope`, and `client_id` and `client_secret` unless sent as Basic credentials", content_type = "application/x-www-form-urlencoded", content = String),
    responses(
        (status = 200, body = AccessToken, headers(("Cache-Control" = String, description = "`no-store`"))),
        (status = 400, description = "invalid_request, invalid_scope or unsupported_grant_type", body = OAuthError),
        (status = 401, description = "invalid_client", body = OAuthError, headers(("WWW-Authenticate" = String, description = "`Basic realm=\"idem\"` when the client sent Basic credentials, or none"))),
        (status = 404, description = "no transmitter here", body = OAuthError),
        (status = 429, description = "temporarily_unavailable: too many failed requests of this client or address (`token_failures`); refused before the secret is looked at", body = OAuthError, headers(("Retry-After" = u64, description = "seconds until one more attempt is allowed"))),
    ),
)]
fn ssf_token() {}

#[utoipa::path(
    post,
    path = "/ssf/{tenant}/streams",
    tag = "shared signals out",
    summary = "Create a stream (SSF §8.1.1.1)",
    description = "The body's `delivery` (`method` push, `urn:ietf:rfc:8935`, with the receiver's `endpoint_url` and optional `authorization_header`; or poll, `urn:ietf:rfc:8936`, the `endpoint_url` then the transmitter's; without `delivery`, poll), `events_requested` and `description` are taken; transmitter properties in it are ignored. The `endpoint_url` must be under one of the receiver's configured `endpoints` (without them, any https URL whose host is not inside idem's own network: loopback, private, link-local, `localhost`); a host inside is taken only when an entry names it. The stream is enabled and includes every subject. A receiver has at most 16 streams. The `authorization_header` is stored sealed under a key derived from `key_secret` and never read back.",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body(content = Object, content_type = "application/json"),
    responses(
        (status = 201, body = StreamConfig),
        (status = 400, description = "invalid-stream or malformed-json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized: no access token (`WWW-Authenticate: Bearer`), or one not valid or expired (`Bearer error=\"invalid_token\"`)", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 403, description = "insufficient-scope: the token lacks the scope the call needs (`ssf.read` to read and poll, `ssf.manage` to write); `WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"…\"`", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "too-many-streams", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "unavailable: the store", body = Problem, content_type = "application/problem+json"),
    ),
    security(("receiver" = []))
)]
fn ssf_create_stream() {}

#[utoipa::path(
    get,
    path = "/ssf/{tenant}/streams",
    tag = "shared signals out",
    summary = "Read a stream, or list the receiver's streams (SSF §8.1.1.2)",
    params(
        ("tenant" = String, Path, description = "The tenant"),
        ("stream_id" = Option<String>, Query, description = "One stream; without it, every stream of the receiver (an array)"),
    ),
    responses(
        (status = 200, body = StreamConfig, description = "The stream, or an array of them without stream_id"),
        (status = 401, description = "unauthorized: no access token (`WWW-Authenticate: Bearer`), or one not valid or expired (`Bearer error=\"invalid_token\"`)", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 403, description = "insufficient-scope: the token lacks the scope the call needs (`ssf.read` to read and poll, `ssf.manage` to write); `WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"…\"`", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 404, description = "not-found: no such stream of this receiver's", body = Problem, content_type = "application/problem+json"),
    ),
    security(("receiver" = []))
)]
fn ssf_read_streams() {}

#[utoipa::path(
    patch,
    path = "/ssf/{tenant}/streams",
    tag = "shared signals out",
    summary = "Update a stream: what the body names (SSF §8.1.1.3)",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body(content = Object, content_type = "application/json", description = "`stream_id` and any of `delivery`, `events_requested`, `description`"),
    responses(
        (status = 200, body = StreamConfig),
        (status = 400, description = "invalid-stream or malformed-json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized: no access token (`WWW-Authenticate: Bearer`), or one not valid or expired (`Bearer error=\"invalid_token\"`)", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 403, description = "insufficient-scope: the token lacks the scope the call needs (`ssf.read` to read and poll, `ssf.manage` to write); `WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"…\"`", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
    ),
    security(("receiver" = []))
)]
fn ssf_update_stream() {}

#[utoipa::path(
    put,
    path = "/ssf/{tenant}/streams",
    tag = "shared signals out",
    summary = "Replace a stream's receiver-supplied properties (SSF §8.1.1.4)",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body(content = Object, content_type = "application/json", description = "`stream_id`, and `delivery`, `events_requested` and `description` (reset when left out: a stream without `delivery` is a poll stream)"),
    responses(
        (status = 200, body = StreamConfig),
        (status = 400, description = "invalid-stream or malformed-json", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized: no access token (`WWW-Authenticate: Bearer`), or one not valid or expired (`Bearer error=\"invalid_token\"`)", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 403, description = "insufficient-scope: the token lacks the scope the call needs (`ssf.read` to read and poll, `ssf.manage` to write); `WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"…\"`", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
    ),
    security(("receiver" = []))
)]
fn ssf_replace_stream() {}

#[utoipa::path(
    delete,
    path = "/ssf/{tenant}/streams",
    tag = "shared signals out",
    summary = "Delete a stream (SSF §8.1.1.5)",
    params(
        ("tenant" = String, Path, description = "The tenant"),
        ("stream_id" = String, Query, description = "The stream"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "invalid-query: no stream_id", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized: no access token (`WWW-Authenticate: Bearer`), or one not valid or expired (`Bearer error=\"invalid_token\"`)", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 403, description = "insufficient-scope: the token lacks the scope the call needs (`ssf.read` to read and poll, `ssf.manage` to write); `WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"…\"`", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
    ),
    security(("receiver" = []))
)]
fn ssf_delete_stream() {}

#[utoipa::path(
    get,
    path = "/ssf/{tenant}/streams/status",
    tag = "shared signals out",
    summary = "A stream's status (SSF §8.1.2.1)",
    params(
        ("tenant" = String, Path, description = "The tenant"),
        ("stream_id" = String, Query, description = "The stream"),
    ),
    responses(
        (status = 200, body = StreamStatusBody),
        (status = 401, description = "unauthorized: no access token (`WWW-Authenticate: Bearer`), or one not valid or expired (`Bearer error=\"invalid_token\"`)", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 403, description = "insufficient-scope: the token lacks the scope the call needs (`ssf.read` to read and poll, `ssf.manage` to write); `WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"…\"`", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
    ),
    security(("receiver" = []))
)]
fn ssf_stream_status() {}

#[utoipa::path(
    post,
    path = "/ssf/{tenant}/streams/status",
    tag = "shared signals out",
    summary = "Set a stream's status (SSF §8.1.2.2)",
    description = "The change is answered, not announced (no stream-updated SET). Once a change to `paused` or `disabled` is answered nothing reaches the stream, push or poll, until it is enabled: its decisions' SETs are held (paused) or dropped (disabled), a verification waits. Enabling a push stream sends what it held at once, oldest first, one at a time.",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body(content = StreamStatusBody, content_type = "application/json"),
    responses(
        (status = 200, body = StreamStatusBody),
        (status = 400, description = "invalid-stream: a status other than enabled, paused, disabled", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized: no access token (`WWW-Authenticate: Bearer`), or one not valid or expired (`Bearer error=\"invalid_token\"`)", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 403, description = "insufficient-scope: the token lacks the scope the call needs (`ssf.read` to read and poll, `ssf.manage` to write); `WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"…\"`", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
    ),
    security(("receiver" = []))
)]
fn ssf_set_stream_status() {}

#[utoipa::path(
    post,
    path = "/ssf/{tenant}/streams/subjects:add",
    tag = "shared signals out",
    summary = "Include a subject in a stream again (SSF §8.1.3.2)",
    description = "`{\"stream_id\", \"subject\"}`: the subject an RFC 9493 subject identifier, digested in the canonical form sources digest subjects in (emails lower-cased), or a string as signals name it. Streams include every subject unless removed; only the digest is stored.",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body(content = Object, content_type = "application/json"),
    responses(
        (status = 200, description = "Included"),
        (status = 400, description = "invalid-stream", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized: no access token (`WWW-Authenticate: Bearer`), or one not valid or expired (`Bearer error=\"invalid_token\"`)", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 403, description = "insufficient-scope: the token lacks the scope the call needs (`ssf.read` to read and poll, `ssf.manage` to write); `WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"…\"`", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
    ),
    security(("receiver" = []))
)]
fn ssf_add_subject() {}

#[utoipa::path(
    post,
    path = "/ssf/{tenant}/streams/subjects:remove",
    tag = "shared signals out",
    summary = "Leave a subject out of a stream (SSF §8.1.3.3)",
    description = "As subjects:add; a stream has at most 10,000 subjects removed.",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body(content = Object, content_type = "application/json"),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "invalid-stream", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized: no access token (`WWW-Authenticate: Bearer`), or one not valid or expired (`Bearer error=\"invalid_token\"`)", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 403, description = "insufficient-scope: the token lacks the scope the call needs (`ssf.read` to read and poll, `ssf.manage` to write); `WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"…\"`", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
    ),
    security(("receiver" = []))
)]
fn ssf_remove_subject() {}

#[utoipa::path(
    post,
    path = "/ssf/{tenant}/streams/verify",
    tag = "shared signals out",
    summary = "Ask for a verification event on a stream (SSF §8.1.4.2)",
    description = "`{\"stream_id\", \"state\"}`: a verification SET echoing `state`, with `sub_id` `{\"format\": \"opaque\", \"id\": <stream_id>}`, is queued for the stream and sent once it is enabled (at once if it is). At most one per `min_verification_interval`.",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body(content = Object, content_type = "application/json"),
    responses(
        (status = 204, description = "The verification SET is queued"),
        (status = 400, description = "invalid-stream", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized: no access token (`WWW-Authenticate: Bearer`), or one not valid or expired (`Bearer error=\"invalid_token\"`)", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 403, description = "insufficient-scope: the token lacks the scope the call needs (`ssf.read` to read and poll, `ssf.manage` to write); `WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"…\"`", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "rate-limited: sooner than min_verification_interval after the last verification; Retry-After says when", body = Problem, content_type = "application/problem+json"),
    ),
    security(("receiver" = []))
)]
fn ssf_verify() {}

#[utoipa::path(
    post,
    path = "/ssf/{tenant}/streams/{stream_id}/poll",
    tag = "shared signals out",
    summary = "Poll a poll stream's SETs (RFC 8936)",
    description = "`{\"maxEvents\", \"returnImmediately\", \"ack\": [jti], \"setErrs\": {jti: {\"err\", \"description\"}}}`, every member optional. Acknowledged SETs are delivered and reported ones failed, durably, before the answer `{\"sets\": {jti: token}, \"moreAvailable\"}` lists what waits, oldest first, at most `maxEvents` (100 at most, and by default). A SET handed out and not acknowledged is handed out again. Unless `returnImmediately`, an empty answer waits up to 20 s for a SET.",
    params(("tenant" = String, Path, description = "The tenant"), ("stream_id" = String, Path, description = "The poll stream")),
    request_body(content = Object, content_type = "application/json"),
    responses(
        (status = 200, body = Object, description = "`{\"sets\": {jti: token}}`, with `\"moreAvailable\": true` when more wait"),
        (status = 400, description = "invalid-stream: a malformed request, or a push stream", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized: no access token (`WWW-Authenticate: Bearer`), or one not valid or expired (`Bearer error=\"invalid_token\"`)", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 403, description = "insufficient-scope: the token lacks the scope the call needs (`ssf.read` to read and poll, `ssf.manage` to write); `WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"…\"`", body = Problem, content_type = "application/problem+json", headers(("WWW-Authenticate" = String))),
        (status = 404, description = "not-found", body = Problem, content_type = "application/problem+json"),
    ),
    security(("receiver" = []))
)]
fn ssf_poll() {}

#[utoipa::path(get, path = "/healthz", tag = "operator", responses(
    (status = 200, description = "Serving: the store made a probe durable just now", body = String, content_type = "text/plain"),
    (status = 503, description = "The store cannot write (a failed disk, an unreachable database): the reason", body = Problem, content_type = "application/problem+json"),
))]
fn healthz() {}

#[utoipa::path(get, path = "/metrics", tag = "operator", responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
fn metrics() {}

#[utoipa::path(get, path = "/openapi.json", tag = "operator", responses((status = 200, description = "This document", body = Object, content_type = "application/json")))]
fn openapi() {}

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(title = "idem", description = "Exactly-once trust decisions for identity webhooks"),
    paths(
        post_signals, get_decision, list_decisions, evaluate_playbook, get_delivery, list_deliveries, redeliver,
        redeliver_matching, list_endpoints, stats, post_source, get_source, source_status, set_subscription_status, delete_subscription,
        change_subjects, list_sources, console,
        console_asset, ssf_metadata, ssf_jwks, ssf_token, ssf_create_stream, ssf_read_streams,
        ssf_update_stream, ssf_replace_stream, ssf_delete_stream, ssf_stream_status,
        ssf_set_stream_status, ssf_add_subject, ssf_remove_subject, ssf_verify, ssf_poll, healthz, metrics, openapi
    ),
    components(schemas(
        SignalRequest, DecisionResponse, ActionResult, ActionStatus, Verdict, Problem,
        CallbackEnvelope, CallbackData, DeliveryView, DeliveryPage, AttemptView, DeliveryStatus,
        DeadReason,
        DecisionView, DecisionPage, DecidedAction, EndpointList, EndpointView, EndpointState,
        RedeliverRequest, Redelivered, SourceReceipt, OktaVerification, TenantStats, SetError,
        SourceStatus, VerificationStatus, StreamStatus, PollStatus, SubscriptionStatus, SourceList, NamedSource,
        TransmitterMetadata, AuthorizationScheme, AccessToken, OAuthError, StreamConfig,
        StreamDelivery, StreamStatusBody, PlaybookEvaluation, RuleError, SubscriptionChange,
        SubjectChange
    )),
    modifiers(&Extras, &Limits)
)]
pub struct ApiDoc;

/// The Bearer scheme, and the list of problem `type` URIs.
struct Extras;

impl Modify for Extras {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        doc.info.version = env!("CARGO_PKG_VERSION").to_string();
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "receiver",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A Shared Signals receiver's access token from POST /ssf/{tenant}/token",
                    ))
                    .build(),
            ),
        );
        let uris: Vec<String> = Kind::ALL.iter().map(|k| k.uri()).collect();
        components.schemas.insert(
            "ProblemType".to_string(),
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some("Every problem `type` URI idem answers with"))
                .enum_values(Some(uris))
                .into(),
        );
    }
}

/// The limits the handlers enforce, written into the document from the handlers' own
/// constants (utoipa's attributes take literals only), so the two cannot drift.
struct Limits;

impl Modify for Limits {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use crate::http::{decisions, deliveries, ingest};
        let paths = &mut doc.paths.paths;
        let pages = [
            (
                "/v1/decisions",
                decisions::DEFAULT_LIMIT,
                decisions::MAX_LIMIT,
            ),
            (
                "/v1/deliveries",
                deliveries::DEFAULT_LIMIT,
                deliveries::MAX_LIMIT,
            ),
        ];
        for (path, default, max) in pages {
            let operation = paths.get_mut(path).and_then(|p| p.get.as_mut());
            if let Some(limit) = operation.and_then(|o| parameter(o, "limit")) {
                limit.description = Some(format!("Page size, 1 to {max} (default {default})"));
                if let Some(schema) = object(limit) {
                    schema.maximum = Some(utoipa::Number::UInt(max));
                }
            }
        }
        // A quoted key takes its two quotes beyond the key's own length.
        let keyed = ["/v1/signals", "/v1/deliveries/redeliver"];
        for path in keyed {
            let operation = paths.get_mut(path).and_then(|p| p.post.as_mut());
            let key = operation.and_then(|o| parameter(o, "Idempotency-Key"));
            if let Some(schema) = key.and_then(object) {
                schema.max_length = Some(crate::key::MAX_KEY_LEN + 2);
            }
        }
        let signals = paths.get_mut("/v1/signals").and_then(|p| p.post.as_mut());
        let too_large = signals.and_then(|o| o.responses.responses.get_mut("413"));
        if let Some(utoipa::openapi::RefOr::T(response)) = too_large {
            response.description = format!(
                "payload-too-large: the body is over {} KiB",
                ingest::MAX_BODY / 1024
            );
        }
        let sources = paths
            .get_mut("/v1/sources/{tenant}/{source}")
            .and_then(|p| p.post.as_mut());
        let too_large = sources.and_then(|o| o.responses.responses.get_mut("413"));
        if let Some(utoipa::openapi::RefOr::T(response)) = too_large {
            response.description = format!(
                "payload-too-large: the body is over {} KiB (ssf: {} KiB), or a batch of CloudEvents holds over {} events",
                crate::source::MAX_SOURCE_BODY / 1024,
                crate::source::set::MAX_SET / 1024,
                crate::source::events::MAX_CLOUDEVENTS_BATCH
            );
        }
    }
}

/// The parameter `name` of `operation`.
fn parameter<'o>(
    operation: &'o mut utoipa::openapi::path::Operation,
    name: &str,
) -> Option<&'o mut utoipa::openapi::path::Parameter> {
    let parameters = operation.parameters.as_mut()?;
    parameters.iter_mut().find(|p| p.name == name)
}

/// The object schema of `parameter`.
fn object(
    parameter: &mut utoipa::openapi::path::Parameter,
) -> Option<&mut utoipa::openapi::schema::Object> {
    match parameter.schema.as_mut()? {
        utoipa::openapi::RefOr::T(utoipa::openapi::Schema::Object(object)) => Some(object),
        _ => None,
    }
}

/// The document as JSON.
pub fn document() -> serde_json::Value {
    serde_json::to_value(ApiDoc::openapi()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn parameter<'d>(doc: &'d Value, path: &str, method: &str, name: &str) -> &'d Value {
        let parameters = doc["paths"][path][method]["parameters"].as_array();
        let found = parameters.and_then(|ps| ps.iter().find(|p| p["name"] == name));
        found.unwrap_or(&Value::Null)
    }

    #[test]
    fn the_documents_limits_are_the_handlers() {
        use crate::http::{decisions, deliveries};
        let doc = document();
        let max = |path, name| parameter(&doc, path, "get", name)["schema"]["maximum"].as_u64();
        assert_eq!(
            max("/v1/decisions", "limit"),
            Some(decisions::MAX_LIMIT as u64)
        );
        assert_eq!(
            max("/v1/deliveries", "limit"),
            Some(deliveries::MAX_LIMIT as u64)
        );
        let key = parameter(&doc, "/v1/signals", "post", "Idempotency-Key");
        let longest = crate::key::MAX_KEY_LEN as u64 + 2;
        assert_eq!(key["schema"]["maxLength"].as_u64(), Some(longest));
        let too_large = &doc["paths"]["/v1/signals"]["post"]["responses"]["413"]["description"];
        let kib = crate::http::ingest::MAX_BODY / 1024;
        assert!(too_large
            .as_str()
            .is_some_and(|d| d.contains(&format!("{kib} KiB"))));
    }
}
