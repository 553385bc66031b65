//! `--static DIR`: the app's own files, as a browser should cache them.
//!
//! - Files under `assets/` are named by their content (a bundler such as Vite
//!   puts a hash in each name), so a name never means two contents: they are
//!   sent `immutable` for a year, and a returning visit asks for nothing.
//! - Everything else (`index.html`, the service worker, a manifest, icons)
//!   keeps its name across releases: `no-cache`, so the browser revalidates
//!   (`Last-Modified`) and a new release is seen at the next load.
//! - A file with a precompressed sibling (`x.br`, `x.gz`, written at build
//!   time at the best ratio) is sent as that sibling to a browser that
//!   accepts it; other files are compressed on the way by the router's
//!   compression layer.
//! - An unknown path outside `assets/` is the app (`index.html`, a
//!   single-page app's routes); an unknown asset is a 404, never the app
//!   cached for a year under the asset's name.

use std::path::Path;

use axum::http::{header, HeaderValue, Response};
use axum::Router;
use tower_http::services::{ServeDir, ServeFile};
use tower_http::set_header::SetResponseHeaderLayer;

use crate::app::App;

/// A year: what `immutable` files are cached for.
pub(crate) const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Revalidate every time.
pub(crate) const REVALIDATE: &str = "no-cache";

/// Serves `dir` under `/` (its `assets/` as immutable) on `router`.
pub(crate) fn serve(router: Router<App>, dir: &Path) -> Router<App> {
    let assets = ServeDir::new(dir.join("assets")).precompressed_br().precompressed_gzip();
    let app = ServeDir::new(dir)
        .precompressed_br()
        .precompressed_gzip()
        .fallback(ServeFile::new(dir.join("index.html")).precompressed_br().precompressed_gzip());
    router
        .nest_service("/assets", tower::ServiceBuilder::new().layer(cache_control(IMMUTABLE)).service(assets))
        .fallback_service(tower::ServiceBuilder::new().layer(cache_control(REVALIDATE)).service(app))
}

/// Sets `Cache-Control` on a successful answer (a 404 or a 304 keeps none of its own).
fn cache_control<B>(
    value: &'static str,
) -> SetResponseHeaderLayer<impl Fn(&Response<B>) -> Option<HeaderValue> + Clone> {
    SetResponseHeaderLayer::overriding(header::CACHE_CONTROL, move |res: &Response<B>| {
        (res.status().is_success() || res.status() == axum::http::StatusCode::NOT_MODIFIED)
            .then(|| HeaderValue::from_static(value))
    })
}
