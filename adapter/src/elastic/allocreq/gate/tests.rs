use super::*;

fn who(nspace: &str, rank: u32) -> Requester {
    Requester {
        nspace: nspace.into(),
        rank,
    }
}

fn per_minute(n: u32) -> RateLimit {
    RateLimit::new(n).expect("a limit")
}

fn refused(r: Result<u64, Refusal>) -> (Status, String) {
    let e = r.expect_err("refused");
    (e.status, e.reason)
}

/// Admits a request of `by` at `at` and answers it at once.
fn served(g: &mut Gate, by: &Requester, at: Instant) -> Result<u64, Refusal> {
    let seq = g.begin(by, None, per_minute(3), at)?;
    g.finish(seq);
    Ok(seq)
}

#[test]
fn one_request_at_a_time() {
    let (mut g, t0, a, b) = (Gate::default(), Instant::now(), who("a", 0), who("b", 0));
    let first = g.begin(&a, Some("grow-1"), per_minute(6), t0).unwrap();
    let (s, why) = refused(g.begin(&b, None, per_minute(6), t0));
    assert_eq!(s, Status::ResourceBusy);
    assert!(
        why.starts_with("allocation request grow-1 is being served"),
        "{why}"
    );
    assert_eq!(g.find("grow-1", &a), Ok(first));
    assert_eq!(refused(g.find("grow-2", &a)).0, Status::NotFound);
    g.finish(first + 1); // not the one in flight: nothing changes
    assert!(g.begin(&b, None, per_minute(6), t0).is_err());
    g.finish(first);
    assert_eq!(refused(g.find("grow-1", &a)).0, Status::NotFound);
    let second = g.begin(&b, None, per_minute(6), t0).unwrap();
    assert!(second > first);
    assert!(refused(g.begin(&a, None, per_minute(6), t0))
        .1
        .contains(&format!("#{second}")));
}

#[test]
fn a_cancel_is_its_requesters_alone() {
    let (mut g, t0) = (Gate::default(), Instant::now());
    let seq = g
        .begin(&who("job@1", 0), Some("grow-1"), per_minute(6), t0)
        .unwrap();
    // Another job's process, or another rank of the same job: refused, the request kept.
    for other in [
        who("job@2", 0),
        who("job@1", 1),
        who("job@1", RANK_WILDCARD),
    ] {
        let (s, why) = refused(g.find("grow-1", &other));
        assert_eq!(s, Status::NoPermissions, "{other}");
        assert_eq!(
            why,
            format!("allocation request \"grow-1\" was made by another process: only the process that made it may cancel it ({other} may not)")
        );
    }
    assert_eq!(g.find("grow-1", &who("job@1", 0)), Ok(seq));
    assert_eq!(who("job@1", RANK_WILDCARD).to_string(), "job@1:*");
    // An id no request in flight has: not found, whoever asks.
    assert_eq!(
        refused(g.find("grow-2", &who("job@2", 0))).0,
        Status::NotFound
    );
}

#[test]
fn a_namespace_past_its_budget_is_refused_and_others_are_not() {
    let (mut g, t0, a, b) = (Gate::default(), Instant::now(), who("a", 0), who("b", 0));
    for _ in 0..3 {
        served(&mut g, &a, t0).unwrap();
    }
    let (s, why) = refused(served(&mut g, &a, t0));
    assert_eq!(s, Status::RateLimited);
    assert_eq!(
        why,
        "a had 3 allocation requests served within the last minute, its budget (ras_k8s_alloc_requests_per_minute); ask again in 20 s"
    );
    // Another requester has its own budget.
    served(&mut g, &b, t0).unwrap();
    // One request back every 20 s, not more.
    let (s, why) = refused(served(&mut g, &a, t0 + Duration::from_secs(15)));
    assert_eq!(s, Status::RateLimited);
    assert!(why.ends_with("ask again in 5 s"), "{why}");
    served(&mut g, &a, t0 + Duration::from_secs(20)).unwrap();
    assert_eq!(
        refused(served(&mut g, &a, t0 + Duration::from_secs(21))).0,
        Status::RateLimited
    );
    // Refusals cost nothing: after a minute the whole budget is back.
    let later = t0 + Duration::from_secs(80);
    for _ in 0..3 {
        served(&mut g, &a, later).unwrap();
    }
    assert!(served(&mut g, &a, later).is_err());
}

#[test]
fn the_ranks_of_a_job_share_its_budget() {
    let (mut g, t0) = (Gate::default(), Instant::now());
    for rank in 0..3 {
        served(&mut g, &who("job@1", rank), t0).unwrap();
    }
    assert_eq!(
        refused(served(&mut g, &who("job@1", 7), t0)).0,
        Status::RateLimited
    );
}

#[test]
fn the_namespace_served_last_waits_for_one_that_asked_meanwhile() {
    let (mut g, t0, a, b) = (Gate::default(), Instant::now(), who("a", 0), who("b", 0));
    let lim = per_minute(60);
    let first = g.begin(&a, None, lim, t0).unwrap();
    // b asks while a's request is served, and a asks again as soon as it is answered.
    assert!(g.begin(&b, None, lim, t0).is_err());
    g.finish(first);
    let (s, why) = refused(g.begin(&a, None, lim, t0 + Duration::from_secs(1)));
    assert_eq!(s, Status::ResourceBusy);
    assert!(why.contains("its turn comes first"), "{why}");
    // b's turn; then a's again.
    let second = g.begin(&b, None, lim, t0 + Duration::from_secs(2)).unwrap();
    g.finish(second);
    let third = g.begin(&a, None, lim, t0 + Duration::from_secs(2)).unwrap();
    g.finish(third);
    // A turn not taken within TURN is lost: a is served again.
    let t1 = t0 + Duration::from_secs(3);
    let fourth = g.begin(&a, None, lim, t1).unwrap();
    assert!(g.begin(&b, None, lim, t1).is_err());
    g.finish(fourth);
    assert!(g
        .begin(&a, None, lim, t1 + TURN - Duration::from_millis(1))
        .is_err());
    assert!(g.begin(&a, None, lim, t1 + TURN).is_ok());
}

#[test]
fn a_namespace_asking_again_during_its_own_request_does_not_wait_for_itself() {
    let (mut g, t0, a) = (Gate::default(), Instant::now(), who("a", 0));
    let lim = per_minute(60);
    let s = g.begin(&a, None, lim, t0).unwrap();
    assert!(g.begin(&who("a", 1), None, lim, t0).is_err());
    g.finish(s);
    assert!(g.begin(&a, None, lim, t0).is_ok());
}

#[test]
fn what_the_gate_remembers_is_bounded() {
    let (mut g, t0) = (Gate::default(), Instant::now());
    let lim = per_minute(600);
    let s = g.begin(&who("a", 0), None, lim, t0).unwrap();
    for i in 0..1000 {
        assert!(g.begin(&who(&format!("t@{i}"), 0), None, lim, t0).is_err());
    }
    assert_eq!(g.waiting.len(), MAX_WAITING);
    assert_eq!(g.waiting[MAX_WAITING - 1].0, "t@999");
    g.finish(s);
    // Budgets are forgotten once full again.
    for i in 0..100 {
        served_under(&mut g, &who(&format!("u@{i}"), 0), lim, t0);
    }
    assert!(g.buckets.len() > 1);
    served_under(&mut g, &who("v", 0), lim, t0 + Duration::from_secs(60));
    assert_eq!(g.buckets.len(), 1, "{:?}", g.buckets.keys());
}

fn served_under(g: &mut Gate, by: &Requester, lim: RateLimit, at: Instant) {
    let s = g.begin(by, None, lim, at).unwrap();
    g.finish(s);
}

#[test]
fn the_limit_is_a_checked_parameter() {
    let mut p = RasParams::default();
    assert_eq!(RateLimit::from_params(&p).unwrap().per_minute(), 6);
    p.alloc_requests_per_minute = 600;
    assert_eq!(RateLimit::from_params(&p).unwrap().per_minute(), 600);
    for bad in [0, -1, 601] {
        p.alloc_requests_per_minute = bad;
        let e = RateLimit::from_params(&p).unwrap_err().to_string();
        assert!(
            e.contains("ras_k8s_alloc_requests_per_minute")
                && e.contains(&format!("\"{bad}\""))
                && e.contains("a whole number from 1 to 600"),
            "{e}"
        );
    }
    assert_eq!(RateLimit::new(0), None);
}
