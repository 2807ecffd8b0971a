//! The one credential of a request: `Authorization: Bearer <key or token>` or
//! `X-API-Key: <key>`, not both (two credentials would leave open which one is meant).

use http::{header, HeaderMap};

/// The credential of `headers`, or why there is none usable (a 401's message).
pub fn credential(headers: &HeaderMap) -> Result<&str, String> {
    let bearer = match headers.get(header::AUTHORIZATION) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .ok_or("the Authorization header must be `Bearer <key or token>`")?,
        ),
    };
    let api_key = match headers.get("x-api-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map(str::trim)
                .map_err(|_| "the X-API-Key header is not text")?,
        ),
    };
    match (bearer, api_key) {
        (Some(_), Some(_)) => {
            Err("send one credential: Authorization or X-API-Key, not both".into())
        }
        (Some(c), None) | (None, Some(c)) if !c.is_empty() => Ok(c),
        _ => Err(
            "missing credential: send an API key (`Authorization: Bearer <key>` or \
             `X-API-Key: <key>`) or a token (`Authorization: Bearer <jwt>`)"
                .into(),
        ),
    }
}

/// Whether a credential has the shape of a JWT (three dot-separated parts).
pub fn looks_like_jwt(s: &str) -> bool {
    s.matches('.').count() == 2
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn one_credential_in_one_of_two_headers() {
        assert_eq!(
            credential(&headers(&[("authorization", "Bearer k")])),
            Ok("k")
        );
        assert_eq!(credential(&headers(&[("x-api-key", " k ")])), Ok("k"));
        for (h, why) in [
            (headers(&[]), "missing credential"),
            (headers(&[("authorization", "Basic a2V5")]), "Bearer"),
            (headers(&[("authorization", "Bearer ")]), "missing"),
            (
                headers(&[("authorization", "Bearer k"), ("x-api-key", "k")]),
                "not both",
            ),
        ] {
            assert!(credential(&h).unwrap_err().contains(why), "{h:?}");
        }
    }
}
