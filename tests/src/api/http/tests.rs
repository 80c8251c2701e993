use super::record::RequestRecord;

fn rec(method: &str, path: &str, query: &str) -> RequestRecord {
    RequestRecord {
        method: method.into(),
        path: path.into(),
        query: query.into(),
        user: "admin".into(),
        status: 200,
        body_bytes: 0,
        server_us: 0,
    }
}

#[test]
fn records_tell_lists_gets_and_watches_apart() {
    let list = rec(
        "GET",
        "/api/v1/namespaces/ns/pods",
        "limit=500&labelSelector=app%3Dx",
    );
    assert!(list.is_list() && !list.is_watch());
    assert_eq!(list.param("limit").as_deref(), Some("500"));
    assert_eq!(list.param("labelSelector").as_deref(), Some("app=x"));
    assert!(rec("GET", "/api/v1/pods", "").is_list());
    assert!(rec("GET", "/apis/batch/v1/namespaces/ns/jobs", "").is_list());
    let get = rec("GET", "/api/v1/namespaces/ns/pods/p-0", "");
    assert!(!get.is_list() && !get.is_watch());
    assert!(!rec("GET", "/apis/batch/v1/namespaces/ns/jobs/j", "").is_list());
    let watch = rec(
        "GET",
        "/api/v1/namespaces/ns/pods",
        "watch=true&resourceVersion=3",
    );
    assert!(watch.is_watch() && !watch.is_list());
    assert!(rec("GET", "/api/v1/watch/namespaces/ns/pods", "").is_watch());
    assert!(!rec("POST", "/api/v1/namespaces/ns/pods", "").is_list());
    assert!(!rec("GET", "/version", "").is_list());
}

#[test]
fn boolean_query_values_read_as_an_api_server_reads_them() {
    for v in ["true", "True", "1", "", "yes"] {
        assert!(crate::api::query::query_true(v), "{v:?} is true");
    }
    for v in ["false", "False", "FALSE", "0"] {
        assert!(!crate::api::query::query_true(v), "{v:?} is false");
    }
    let w = rec("GET", "/api/v1/namespaces/ns/pods", "watch=True");
    assert!(w.is_watch() && !w.is_list());
    assert!(!rec("GET", "/api/v1/namespaces/ns/pods", "watch=False").is_watch());
}
