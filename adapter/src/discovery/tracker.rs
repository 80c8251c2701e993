//! The selected pods during the readiness wait, kept split by readiness and in allocation order
//! as watch events arrive.
//!
//! A job's pods become ready one by one: with N pods the wait sees about N events. Classifying
//! and sorting every pod on each of them costs O(N log N) per event, O(N² log N) for the wait.
//! [`PodTracker`] instead re-classifies only the pod an event carries and moves its
//! `OrderKey` between ordered sets: O(log N) per event. Its order is exactly the order of a
//! full sort ([`evaluate`]); the tests check that after every step of random event
//! sequences.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::record::PodRecord;

use super::order::{natural_cmp, sort_pods_by, OrderKey};
use super::readiness::{classify, PodReadiness};

/// The selected pods split by readiness.
#[derive(Debug, Clone, Default)]
pub struct Evaluation<'a> {
    /// Allocatable pods, in allocation order.
    pub ready: Vec<&'a PodRecord>,
    /// (name, description) of pods that may still become ready.
    pub not_ready: Vec<(String, String)>,
    /// (name, reason) of terminating or finished pods.
    pub excluded: Vec<(String, String)>,
}

/// Classifies every pod; ready ones are sorted into allocation order. O(n log n): the wait
/// keeps this state incrementally in a [`PodTracker`] instead.
pub fn evaluate<'a>(pods: impl IntoIterator<Item = &'a PodRecord>) -> Evaluation<'a> {
    let mut e = Evaluation::default();
    for p in pods {
        match classify(p) {
            PodReadiness::Ready(_) => e.ready.push(p),
            PodReadiness::NotReady(d) => e.not_ready.push((name_of(p), d)),
            PodReadiness::Excluded(d) => e.excluded.push((name_of(p), d)),
        }
    }
    sort_pods_by(&mut e.ready, |p| p);
    e.not_ready.sort_by(|a, b| natural_cmp(&a.0, &b.0));
    e
}

/// Which set a pod is in, with the key it is filed under there.
#[derive(Debug, Clone)]
enum Place {
    Ready(OrderKey),
    NotReady(OrderKey),
    Excluded,
}

/// The selected pods by name, classified, the ready ones in allocation order.
///
/// Pods are boxed: a `Pod` is a few kilobytes, and moving it around inside a map on every
/// insertion (what a B-tree does with its values) cost more than everything else here.
#[derive(Debug, Default)]
pub struct PodTracker {
    pods: HashMap<String, Box<PodRecord>>,
    place: HashMap<String, Place>,
    /// Ready pods in allocation order.
    ready: BTreeSet<OrderKey>,
    /// Pods that may still become ready, in natural name order, with their description.
    not_ready: BTreeMap<OrderKey, String>,
    /// Terminating or finished pods by name, with the reason.
    excluded: BTreeMap<String, String>,
}

fn name_of(p: &PodRecord) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

impl PodTracker {
    /// Tracks `pods` (a pod listed twice counts once, the later copy wins).
    pub fn new(pods: impl IntoIterator<Item = PodRecord>) -> PodTracker {
        let mut t = PodTracker::default();
        for p in pods {
            t.apply(p);
        }
        t
    }

    /// Adds a pod or replaces the pod of the same name; O(log n).
    pub fn apply(&mut self, pod: PodRecord) {
        let name = name_of(&pod);
        self.unfile(&name);
        let place = match classify(&pod) {
            PodReadiness::Ready(_) => {
                let key = OrderKey::of(&pod);
                self.ready.insert(key.clone());
                Place::Ready(key)
            }
            PodReadiness::NotReady(d) => {
                let key = OrderKey::by_name(&name);
                self.not_ready.insert(key.clone(), d);
                Place::NotReady(key)
            }
            PodReadiness::Excluded(d) => {
                self.excluded.insert(name.clone(), d);
                Place::Excluded
            }
        };
        self.place.insert(name.clone(), place);
        self.pods.insert(name, Box::new(pod));
    }

    /// Forgets a pod; returns it if it was tracked. O(log n).
    pub fn remove(&mut self, name: &str) -> Option<PodRecord> {
        self.unfile(name);
        self.pods.remove(name).map(|p| *p)
    }

    /// Replaces every pod with `pods` (a fresh list); returns the names that are gone.
    pub(crate) fn replace_all(&mut self, pods: impl IntoIterator<Item = PodRecord>) -> Vec<String> {
        let fresh = PodTracker::new(pods);
        let gone = self
            .pods
            .keys()
            .filter(|n| !fresh.pods.contains_key(*n))
            .cloned()
            .collect();
        *self = fresh;
        gone
    }

    fn unfile(&mut self, name: &str) {
        match self.place.remove(name) {
            Some(Place::Ready(k)) => {
                self.ready.remove(&k);
            }
            Some(Place::NotReady(k)) => {
                self.not_ready.remove(&k);
            }
            Some(Place::Excluded) => {
                self.excluded.remove(name);
            }
            None => {}
        }
    }

    /// Every tracked pod, in no particular order.
    pub fn pods(&self) -> impl Iterator<Item = &PodRecord> {
        self.pods.values().map(|p| &**p)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.pods.contains_key(name)
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    pub(crate) fn not_ready_len(&self) -> usize {
        self.not_ready.len()
    }

    /// Names of the first `n` ready pods in allocation order.
    pub fn first_ready(&self, n: usize) -> Vec<String> {
        self.ready
            .iter()
            .take(n)
            .map(|k| k.name().to_string())
            .collect()
    }

    /// Names of the first `n` not-ready pods in natural name order.
    pub fn first_not_ready(&self, n: usize) -> Vec<String> {
        self.not_ready
            .keys()
            .take(n)
            .map(|k| k.name().to_string())
            .collect()
    }

    /// The whole state as an [`Evaluation`] (O(n); for messages, not per event).
    pub fn evaluation(&self) -> Evaluation<'_> {
        Evaluation {
            ready: self
                .ready
                .iter()
                .filter_map(|k| self.pods.get(k.name()).map(|p| &**p))
                .collect(),
            not_ready: self
                .not_ready
                .iter()
                .map(|(k, d)| (k.name().to_string(), d.clone()))
                .collect(),
            excluded: self
                .excluded
                .iter()
                .map(|(n, d)| (n.clone(), d.clone()))
                .collect(),
        }
    }

    /// Moves the pods named by `names` out, in that order.
    pub fn take(&mut self, names: &[String]) -> Vec<PodRecord> {
        names.iter().filter_map(|n| self.remove(n)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::order::{JOBSET_JOB_INDEX, JOB_COMPLETION_INDEX, STATEFULSET_POD_INDEX};
    use super::super::record::{RecordCondition, RecordStatus};
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    /// A deterministic xorshift generator (no dependency, reproducible failures).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A pod named `w-<n>` in one of the states and index kinds discovery meets.
    fn random_pod(rng: &mut Rng, n: u64) -> PodRecord {
        let mut p = PodRecord::default();
        p.metadata.name = Some(format!("w-{n}"));
        let idx = (rng.below(40)).to_string();
        let job = (rng.below(3)).to_string();
        let labels: Vec<(&str, String)> = match rng.below(5) {
            0 => vec![(JOB_COMPLETION_INDEX, idx)],
            1 => vec![(JOB_COMPLETION_INDEX, idx), (JOBSET_JOB_INDEX, job)],
            2 => vec![(STATEFULSET_POD_INDEX, idx)],
            3 => vec![(JOB_COMPLETION_INDEX, "not-a-number".into())],
            _ => vec![],
        };
        p.metadata.labels = Some(
            labels
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        );
        let (phase, ready) = match rng.below(6) {
            0 => ("Pending", false),
            1 => ("Running", false),
            2 => ("Succeeded", false),
            _ => ("Running", true),
        };
        if rng.below(15) == 0 {
            p.metadata.deletion_timestamp = Some(Time(Default::default()));
        }
        p.status = Some(RecordStatus {
            phase: Some(phase.into()),
            pod_ip: (rng.below(10) != 0).then(|| format!("10.0.0.{}", n % 250 + 1)),
            conditions: Some(vec![RecordCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    fn names(pods: &[&PodRecord]) -> Vec<String> {
        pods.iter().map(|p| name_of(p)).collect()
    }

    /// After every event of random sequences (pods appearing, changing index and readiness,
    /// becoming ready, terminating, being deleted, relists), the tracker's ready pods are in
    /// the order of a full sort of all pods, and its not-ready and excluded pods are those of a
    /// full classification, in the same order.
    #[test]
    fn incremental_order_equals_a_full_sort_after_every_event() {
        for seed in 1..=20u64 {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed);
            let mut reference: BTreeMap<String, PodRecord> = BTreeMap::new();
            let mut t = PodTracker::default();
            for step in 0..400 {
                match rng.below(20) {
                    0..=14 => {
                        let k = rng.below(60);
                        let p = random_pod(&mut rng, k);
                        reference.insert(name_of(&p), p.clone());
                        t.apply(p);
                    }
                    15..=18 => {
                        let n = format!("w-{}", rng.below(60));
                        assert_eq!(reference.remove(&n).is_some(), t.remove(&n).is_some());
                    }
                    _ => {
                        // A relist: some pods gone, the others possibly changed.
                        let mut fresh: Vec<PodRecord> = Vec::new();
                        for n in reference.keys() {
                            if rng.below(4) != 0 {
                                let k: u64 = n[2..].parse().unwrap();
                                fresh.push(random_pod(&mut rng, k));
                            }
                        }
                        let mut gone: Vec<String> = reference
                            .keys()
                            .filter(|n| !fresh.iter().any(|p| &name_of(p) == *n))
                            .cloned()
                            .collect();
                        reference = fresh.iter().map(|p| (name_of(p), p.clone())).collect();
                        let mut said = t.replace_all(fresh);
                        said.sort();
                        gone.sort();
                        assert_eq!(said, gone, "seed {seed} step {step}");
                    }
                }
                let full = evaluate(reference.values());
                let inc = t.evaluation();
                assert_eq!(
                    names(&inc.ready),
                    names(&full.ready),
                    "seed {seed} step {step}"
                );
                assert_eq!(inc.not_ready, full.not_ready, "seed {seed} step {step}");
                assert_eq!(inc.excluded, full.excluded, "seed {seed} step {step}");
                assert_eq!(t.ready_len(), full.ready.len());
                assert_eq!(t.not_ready_len(), full.not_ready.len());
                assert_eq!(t.len(), reference.len());
                let k = rng.below(8) as usize;
                assert_eq!(
                    t.first_ready(k),
                    names(&full.ready[..k.min(full.ready.len())])
                );
                assert_eq!(
                    t.first_not_ready(k),
                    full.not_ready
                        .iter()
                        .take(k)
                        .map(|(n, _)| n.clone())
                        .collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn pods_becoming_ready_one_by_one_keep_index_order() {
        // Pods appear unready in reverse, then become ready in a scrambled order; whenever
        // some are ready they are in completion-index order, not arrival or name order.
        let pod = |i: u64, ready: bool| {
            let mut p = PodRecord::default();
            p.metadata.name = Some(format!("job-{}", (i * 7919) % 1000));
            p.metadata.labels = Some([(JOB_COMPLETION_INDEX.to_string(), i.to_string())].into());
            p.status = Some(RecordStatus {
                phase: Some("Running".into()),
                pod_ip: Some("10.1.0.1".into()),
                conditions: Some(vec![RecordCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            });
            p
        };
        let mut t = PodTracker::new((0..100).rev().map(|i| pod(i, false)));
        assert_eq!((t.ready_len(), t.not_ready_len()), (0, 100));
        let mut ready = Vec::new();
        for step in 0..100u64 {
            let i = (step * 37) % 100;
            t.apply(pod(i, true));
            ready.push(i);
            ready.sort();
            let want: Vec<String> = ready
                .iter()
                .map(|i| format!("job-{}", (i * 7919) % 1000))
                .collect();
            assert_eq!(t.first_ready(usize::MAX), want);
            assert_eq!(t.not_ready_len(), 99 - step as usize);
        }
        let first3 = t.first_ready(3);
        let taken = t.take(&first3);
        assert_eq!(taken.iter().map(name_of).collect::<Vec<_>>(), first3);
        assert_eq!(t.ready_len(), 97);
    }
}
