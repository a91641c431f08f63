//! `GET /console`: the web console, a page and its script, style sheet and icon, compiled into
//! the binary (`src/console/`), so nothing else is installed, run or fetched. The page signs in
//! with the tenant's API key, keeps it in the tab's sessionStorage and sends it to the public
//! API as the Bearer token: the console has no endpoint, session or cookie of its own. Every
//! asset is served with a Content-Security-Policy that allows this origin only and no inline
//! script or style, so neither an injected tag nor a rogue asset can run or send the key away.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::http::problem::{ApiError, Kind};

/// What the page may load and where it may connect: this origin only, nothing inline.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One embedded file: its bytes, type and validator.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    etag: HeaderValue,
}

impl Asset {
    fn new(name: &'static str, content_type: &'static str, body: &'static [u8]) -> Asset {
        let digest = idem_schemas::lower_hex(&idem_schemas::hash::sha256(body)[..12]);
        Asset {
            name,
            content_type,
            body,
            etag: HeaderValue::from_str(&format!("\"{digest}\""))
                .unwrap_or(HeaderValue::from_static("\"console\"")),
        }
    }

    /// The asset, or 304 when the browser's copy has the same tag.
    fn respond(&self, request: &HeaderMap) -> Response {
        // RFC 9110 13.1.2: a list of tags, compared weakly (a proxy that compresses may have
        // marked the tag W/), or `*`.
        let etag = self.etag.to_str().unwrap_or_default();
        let fresh = request
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(|tag| tag.trim())
            .any(|tag| tag == "*" || tag.trim_start_matches("W/") == etag);
        let mut response = if fresh {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            ([(header::CONTENT_TYPE, self.content_type)], self.body).into_response()
        };
        let headers = response.headers_mut();
        headers.insert(header::ETAG, self.etag.clone());
        // Revalidated on every load (a 304 when unchanged), so a new idem serves its own page.
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        response
    }
}

static PAGE: LazyLock<Asset> = LazyLock::new(|| {
    Asset::new(
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../console/index.html"),
    )
});

static ASSETS: LazyLock<[Asset; 3]> = LazyLock::new(|| {
    [
        Asset::new(
            "app.js",
            "text/javascript; charset=utf-8",
            include_bytes!("../console/app.js"),
        ),
        Asset::new(
            "app.css",
            "text/css; charset=utf-8",
            include_bytes!("../console/app.css"),
        ),
        Asset::new(
            "icon.svg",
            "image/svg+xml",
            include_bytes!("../console/icon.svg"),
        ),
    ]
});

/// `GET /console`.
pub async fn page(headers: HeaderMap) -> Response {
    PAGE.respond(&headers)
}

/// `GET /console/{asset}`.
pub async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Result<Response, ApiError> {
    ASSETS
        .iter()
        .find(|asset| asset.name == name)
        .map(|asset| asset.respond(&headers))
        .ok_or_else(|| {
            ApiError::new(
                Kind::NotFound,
                format!("the console has no asset {name:?}; open /console"),
            )
        })
}
