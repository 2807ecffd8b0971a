//! The console: a search playground and a status page in the browser, served by the node at
//! `/console` (docs/console.md). Plain HTML, CSS and JavaScript compiled into the binary
//! (`assets/`); no build step, nothing loaded from elsewhere (the Content-Security-Policy
//! allows this origin only). The page holds no data and no credentials of its own: it asks for
//! an API key or a JWT and sends it as `Authorization: Bearer` on every call to the API
//! (`/v1/retrieve`, `/v1/answer`, `/v1/documents/{id}/chunks`, `/v1/status`), so it shows what
//! that identity may see and nothing more.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

/// The policy of every console answer: scripts, styles, images and API calls from this
/// origin only; no frames, no forms posted elsewhere, no plugins.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The console's routes (merged into the API router when `[query] console` is on).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route(
            "/console/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/console/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/console/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
}

/// One asset with the console's security headers.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(path: &str) -> Response {
        router::<()>()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn assets_are_served_with_a_policy_that_forbids_other_origins() {
        for (path, kind) in [
            ("/console/", "text/html"),
            ("/console/app.js", "text/javascript"),
            ("/console/app.css", "text/css"),
        ] {
            let r = get(path).await;
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            let h = r.headers();
            assert!(h[header::CONTENT_TYPE].to_str().unwrap().starts_with(kind));
            let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(csp.starts_with("default-src 'none'"), "{csp}");
            assert!(
                csp.contains("connect-src 'self'") && !csp.contains("http"),
                "{csp}"
            );
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        }
        assert_eq!(
            get("/console").await.status(),
            StatusCode::PERMANENT_REDIRECT
        );
    }

    #[test]
    fn the_page_loads_nothing_from_elsewhere_and_holds_no_inline_script() {
        for text in [INDEX_HTML, APP_JS, APP_CSS] {
            // The SVG namespace is a name, not a load.
            let text = text.replace("\"http://www.w3.org/2000/svg\"", "");
            for outside in ["http://", "https://", "//cdn", "@import"] {
                assert!(!text.contains(outside), "{outside} in an asset");
            }
        }
        // Inline scripts and handlers would be refused by the policy: the page has none.
        assert!(!INDEX_HTML.contains("<script>") && !INDEX_HTML.contains(" onclick="));
        assert!(INDEX_HTML.contains(r#"<script src="app.js""#));
    }
}
