//! The record of each request the server answered.

/// One request the server answered: what a client asked for and how big the answer was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// The raw query string ("" when none).
    pub query: String,
    /// The authenticated user (an impersonated one when the request impersonated), "" when
    /// the request had no valid token.
    pub user: String,
    pub status: u16,
    /// Bytes of the response body when it was sent whole (0 for streams such as watches).
    pub body_bytes: u64,
    /// Microseconds the server spent on the request until its response was ready to send
    /// (authentication, store access, filtering and, for whole bodies, serialization); the
    /// rest of what a client waits is transfer, TLS and its own work.
    pub server_us: u64,
}

impl RequestRecord {
    /// Whether this was a watch (`watch=true`/`watch=1` or a legacy `/watch/` path).
    pub fn is_watch(&self) -> bool {
        crate::api::faults::is_watch(Some(&self.query)) || self.path.contains("/watch/")
    }

    /// Whether this was a list (a GET of a collection that is not a watch). A collection path
    /// ends with a resource name: `/api/v1/pods`, `/api/v1/namespaces/NS/pods`,
    /// `/apis/G/V/namespaces/NS/R`.
    pub fn is_list(&self) -> bool {
        if self.method != "GET" || self.is_watch() {
            return false;
        }
        let parts: Vec<&str> = self.path.trim_matches('/').split('/').collect();
        let rest = match parts.first() {
            Some(&"api") if parts.len() >= 2 => &parts[2..],
            Some(&"apis") if parts.len() >= 3 => &parts[3..],
            _ => return false,
        };
        matches!(rest, [_] | ["namespaces", _, _])
    }

    /// The value of query parameter `key`, if present.
    pub fn param(&self, key: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }
}
