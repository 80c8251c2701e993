//! The syntax of Kubernetes names: DNS labels (namespaces), DNS subdomains (label key prefixes)
//! and the name part of label keys and values.

/// 1-63 bytes, starting and ending with an ASCII letter or digit, every byte one `allowed`
/// takes.
fn is_label(s: &str, allowed: impl Fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|&c| allowed(c))
}

/// An RFC 1123 label: lowercase letters, digits and '-' (a namespace name).
pub(crate) fn is_dns_label(s: &str) -> bool {
    is_label(s, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'
    })
}

/// Dot-separated DNS labels, at most 253 bytes in all.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The name of a label key, or a label value: letters, digits, '-', '_' and '.'.
pub(crate) fn is_name_part(s: &str) -> bool {
    is_label(s, |c| {
        c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')
    })
}
