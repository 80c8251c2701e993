//! Query parameters read as the Kubernetes API server reads them.

/// A boolean query parameter's value as a Kubernetes API server reads it (its
/// `Convert_Slice_string_To_bool`): `0` and `false` in any case are false, any other value,
/// the empty one included, is true. The Python client sends `follow=True`, `watch=True`.
pub fn query_true(value: &str) -> bool {
    value != "0" && !value.eq_ignore_ascii_case("false")
}
