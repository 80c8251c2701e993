//! The sandbox API server's watches and lists (no pods run), through kube-rs: events in order,
//! a watcher relisting after 410 Gone, paging through many objects while many watches keep up,
//! streaming lists and bookmarks.
#![forbid(unsafe_code)]

mod common;

use common::api::{admin, api_err, make_ns, next_event, pod, WAIT};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use sandbox::api::{ApiOptions, ApiServer, Part};
use sandbox::harness::unique;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_added_modified_deleted_in_order() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("watch");
    make_ns(&c, &ns).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let list = pods.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.clone().unwrap();
    let mut stream = pods
        .watch(&WatchParams::default().labels("app=w"), &rv)
        .await
        .unwrap()
        .boxed();

    pods.create(&PostParams::default(), &pod("p1", json!({"app": "w"})))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod("other", json!({"app": "nope"})),
    )
    .await
    .unwrap();
    pods.patch(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"x": "y"}}})),
    )
    .await
    .unwrap();
    pods.delete("p1", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    let mut last_rv = 0u64;
    for _ in 0..3 {
        let ev = next_event(&mut stream, "p1's events").await.unwrap();
        let (kind, p) = match ev {
            WatchEvent::Added(p) => ("ADDED", p),
            WatchEvent::Modified(p) => ("MODIFIED", p),
            WatchEvent::Deleted(p) => ("DELETED", p),
            other => panic!("unexpected event {other:?}"),
        };
        assert_eq!(
            p.metadata.name.as_deref(),
            Some("p1"),
            "the selector must filter out other pods"
        );
        let rv: u64 = p.metadata.resource_version.unwrap().parse().unwrap();
        assert!(rv > last_rv, "resourceVersions must increase");
        last_rv = rv;
        if kind == "MODIFIED" {
            assert_eq!(p.metadata.annotations.unwrap()["x"], "y");
        }
        seen.push(kind);
    }
    assert_eq!(seen, ["ADDED", "MODIFIED", "DELETED"]);

    // Replay: a watch from the list's resourceVersion sees the same history again.
    let mut replay = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let mut names = Vec::new();
    for _ in 0..4 {
        match next_event(&mut replay, "replayed events").await.unwrap() {
            WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p) => {
                names.push(p.metadata.name.unwrap())
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert_eq!(names, ["p1", "other", "p1", "p1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_survives_410_gone_by_relisting() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("gone");
    make_ns(&c, &ns).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    pods.create(&PostParams::default(), &pod("before", json!({})))
        .await
        .unwrap();

    // Short watch requests, so that the watcher re-watches from its last resourceVersion.
    let cfg = watcher::Config::default().timeout(1);
    let mut w = watcher(pods.clone(), cfg).boxed();
    loop {
        if let Ok(watcher::Event::InitDone) = next_event(&mut w, "the initial list").await {
            break;
        }
    }
    server.store().compact();
    pods.create(&PostParams::default(), &pod("after", json!({})))
        .await
        .unwrap();

    let mut saw_gone = false;
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(
            Instant::now() < deadline,
            "the watcher did not relist and see pod 'after' (410 seen: {saw_gone})"
        );
        match next_event(&mut w, "410 and relist").await {
            Err(watcher::Error::WatchError(e)) if e.code == 410 => saw_gone = true,
            Err(e) => panic!("unexpected watcher error {e:?}"),
            Ok(watcher::Event::InitApply(p))
                if saw_gone && p.metadata.name.as_deref() == Some("after") =>
            {
                break
            }
            Ok(watcher::Event::Apply(p)) if p.metadata.name.as_deref() == Some("after") => {
                panic!("the watch resumed across a compaction instead of failing with 410")
            }
            Ok(_) => {}
        }
    }

    // A raw watch from a compacted resourceVersion gets one ERROR event with a 410 Status.
    let mut raw = pods
        .watch(&WatchParams::default(), "1")
        .await
        .unwrap()
        .boxed();
    match next_event(&mut raw, "the 410 error").await.unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("expected an ERROR event, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_through_ten_thousand_pods_and_many_watches_keep_up() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("scale");
    make_ns(&c, &ns).await;
    let store = server.store();
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    const N: usize = 10_000;
    const SHARDS: usize = 16;

    // Watches open before the pods are created: one sees every ADDED event, and one per shard
    // label value sees exactly its shard's (the server filters per watcher).
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut tasks = Vec::new();
    for shard in std::iter::once(None).chain((0..SHARDS).map(Some)) {
        let wp = match shard {
            Some(k) => WatchParams::default().labels(&format!("shard=s{k}")),
            None => WatchParams::default(),
        };
        let want = if shard.is_some() { N / SHARDS } else { N };
        let s = pods.watch(&wp, &rv).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let mut s = s.boxed();
            let mut n = 0;
            while n < want {
                match tokio::time::timeout(Duration::from_secs(60), s.try_next()).await {
                    Ok(Ok(Some(WatchEvent::Added(p)))) => {
                        if let Some(k) = shard {
                            assert_eq!(p.metadata.labels.unwrap()["shard"], format!("s{k}"));
                        }
                        n += 1
                    }
                    Ok(Ok(Some(WatchEvent::Bookmark(_)))) => {}
                    other => panic!(
                        "watch (shard {shard:?}) ended after {n} of {want} events: {other:?}"
                    ),
                }
            }
            n
        }));
    }
    let t0 = Instant::now();
    let template = serde_json::to_value(pod("x", json!({"app": "scale"}))).unwrap();
    for i in 0..N {
        let mut p = template.clone();
        p["metadata"]["name"] = json!(format!("pod-{i:05}"));
        p["metadata"]["labels"]["parity"] = json!(if i % 2 == 0 { "even" } else { "odd" });
        p["metadata"]["labels"]["shard"] = json!(format!("s{}", i % SHARDS));
        store
            .create(&sandbox::api::resources::PODS, &ns, p, false)
            .unwrap();
    }
    let created = t0.elapsed();
    for t in tasks {
        t.await.unwrap();
    }
    eprintln!(
        "created {N} pods in {created:?}; {} watches saw theirs after {:?}",
        SHARDS + 1,
        t0.elapsed()
    );

    // Page through with limit=500 while pods elsewhere change: every pod exactly once.
    let mut seen = std::collections::HashSet::new();
    let mut lp = ListParams::default().limit(500);
    let mut pages = 0;
    loop {
        let page = pods.list(&lp).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 500);
        for p in &page.items {
            assert!(
                seen.insert(p.metadata.name.clone().unwrap()),
                "{:?} listed twice",
                p.metadata.name
            );
        }
        if pages == 3 {
            // Changes in the middle of paging do not disturb the pages still to come.
            store
                .modify(
                    &sandbox::api::resources::PODS,
                    &ns,
                    "pod-09999",
                    Part::Main,
                    |v| v["metadata"]["labels"]["touched"] = json!("yes"),
                )
                .unwrap();
        }
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(seen.len(), N);
    assert_eq!(pages, N / 500);

    // A selector over all of them.
    let odd = pods
        .list(&ListParams::default().labels("parity=odd"))
        .await
        .unwrap();
    assert_eq!(odd.items.len(), N / 2);

    // A continue token from before a compaction is refused with 410.
    let first = pods.list(&ListParams::default().limit(500)).await.unwrap();
    store.compact();
    let e = api_err(
        pods.list(
            &ListParams::default()
                .limit(500)
                .continue_token(first.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 410);
    assert!(
        created < Duration::from_secs(60),
        "creating {N} pods took {created:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_lists_and_bookmarks() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    server.set_bookmark_interval(Duration::from_millis(100));
    let c = admin(&server).await;
    let ns = unique("stream");
    make_ns(&c, &ns).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    for n in ["a", "b"] {
        pods.create(&PostParams::default(), &pod(n, json!({})))
            .await
            .unwrap();
    }
    // sendInitialEvents: ADDED for what exists, then the initial-events-end bookmark.
    let mut w = watcher(pods.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut initial = Vec::new();
    loop {
        match next_event(&mut w, "the streamed initial list")
            .await
            .unwrap()
        {
            watcher::Event::Init => {}
            watcher::Event::InitApply(p) => initial.push(p.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    initial.sort();
    assert_eq!(initial, ["a", "b"]);
    pods.create(&PostParams::default(), &pod("c", json!({})))
        .await
        .unwrap();
    match next_event(&mut w, "pod c").await.unwrap() {
        watcher::Event::Apply(p) => assert_eq!(p.metadata.name.as_deref(), Some("c")),
        other => panic!("unexpected {other:?}"),
    }
    // Periodic bookmarks carry the latest resourceVersion.
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut raw = pods
        .watch(&WatchParams::default().labels("none=here"), &rv)
        .await
        .unwrap()
        .boxed();
    pods.create(&PostParams::default(), &pod("d", json!({})))
        .await
        .unwrap();
    let d_rv: u64 = pods
        .get("d")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
        .parse()
        .unwrap();
    loop {
        match next_event(&mut raw, "a bookmark").await.unwrap() {
            WatchEvent::Bookmark(b)
                if b.metadata.resource_version.parse::<u64>().unwrap() >= d_rv =>
            {
                break
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("the selector matches nothing, so only bookmarks come: {other:?}"),
        }
    }
}
