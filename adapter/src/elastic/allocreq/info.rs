//! A request's `pmix_info_t` array as `cabi` reads it, turned into a [`Request`], and the keys
//! of an answer.
use super::rules::{Directive, Request};

/// `PMIX_ALLOC_NUM_NODES` and the other keys `ras k8s` reads or writes (PMIx 5.0.5's strings).
pub const NUM_NODES: &str = "pmix.alloc.nnodes";
pub const NUM_CPUS: &str = "pmix.alloc.ncpus";
pub const NODE_LIST: &str = "pmix.alloc.nlist";
pub const REQ_ID: &str = "pmix.alloc.reqid";
pub const ALLOC_ID: &str = "pmix.alloc.id";
pub const TIMEOUT: &str = "pmix.timeout";
pub const WAIT_ALL_NODES: &str = "pmix.alloc.waitall";
pub const TEXT_MESSAGE: &str = "pmix.evtext";

/// One attribute's value, as far as `ras k8s` needs to tell them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Number(u64),
    Text(String),
    /// A value of another type (a flag, an array, ...).
    Other,
}

/// The request PRRTE handed over: directive `directive` (`pmix_alloc_directive_t`) and its
/// attributes. Allocation attributes `ras k8s` cannot honour are listed as such (the request
/// is then refused, naming the first); `PMIX_ALLOC_WAIT_ALL_NODES` is what it does anyway;
/// attributes of other families (the requester's own) are left alone.
pub fn request(directive: u8, attrs: impl IntoIterator<Item = (String, Value)>) -> Request {
    let mut r = Request {
        directive: Some(Directive::from_pmix(directive)),
        ..Request::default()
    };
    for (key, value) in attrs {
        match (key.as_str(), value) {
            (NUM_NODES, Value::Number(n)) => r.num_nodes = Some(n),
            (NUM_CPUS, Value::Number(n)) => r.num_cpus = Some(n),
            (NODE_LIST, Value::Text(s)) => r.node_list = Some(s),
            (REQ_ID, Value::Text(s)) => r.req_id = Some(s),
            (TIMEOUT, Value::Number(n)) => r.timeout_s = Some(n),
            (WAIT_ALL_NODES, _) => {}
            (NUM_NODES | NUM_CPUS | NODE_LIST | REQ_ID | TIMEOUT, v) => r
                .unhonoured
                .push(format!("{key} (a value of the wrong type: {v:?})")),
            (k, _) if k.starts_with("pmix.alloc.") => r.unhonoured.push(key),
            _ => {}
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(k: &str, v: u64) -> (String, Value) {
        (k.to_string(), Value::Number(v))
    }
    fn t(k: &str, v: &str) -> (String, Value) {
        (k.to_string(), Value::Text(v.to_string()))
    }

    #[test]
    fn the_attributes_ras_k8s_reads_are_read() {
        let r = request(
            2,
            [
                n(NUM_NODES, 2),
                t(REQ_ID, "more"),
                n(TIMEOUT, 30),
                (WAIT_ALL_NODES.into(), Value::Other),
                t("pmix.some.other", "x"),
            ],
        );
        assert_eq!(r.directive, Some(Directive::Extend));
        assert_eq!(r.num_nodes, Some(2));
        assert_eq!(r.req_id.as_deref(), Some("more"));
        assert_eq!(r.timeout_s, Some(30));
        assert!(r.unhonoured.is_empty(), "{:?}", r.unhonoured);
        let r = request(3, [t(NODE_LIST, "a,b"), n(NUM_CPUS, 4)]);
        assert_eq!(r.directive, Some(Directive::Release));
        assert_eq!(r.node_list.as_deref(), Some("a,b"));
        assert_eq!(r.num_cpus, Some(4));
    }

    #[test]
    fn an_allocation_attribute_it_cannot_honour_or_of_the_wrong_type_is_listed() {
        let r = request(
            2,
            [
                t("pmix.alloc.time", "10:00"),
                t(NUM_NODES, "two"),
                n("pmix.alloc.msize", 5),
            ],
        );
        assert_eq!(r.unhonoured.len(), 3, "{:?}", r.unhonoured);
        assert_eq!(r.unhonoured[0], "pmix.alloc.time");
        assert!(
            r.unhonoured[1].starts_with(NUM_NODES),
            "{}",
            r.unhonoured[1]
        );
        assert_eq!(r.num_nodes, None);
    }
}
