//! The order in which pods become PRRTE nodes (node 0 first).
//!
//! Pods are sorted by their workload index, read from a label or annotation:
//!
//! * `batch.kubernetes.io/job-completion-index` (Indexed Jobs),
//! * `apps.kubernetes.io/pod-index` (StatefulSets),
//! * `prrte-k8s.io/node-group` (an MPIJob's JobSet: its launcher's pod 0, its workers' 1,
//!   whichever order the JobSet lists them in), else `jobset.sigs.k8s.io/job-global-index`,
//!   else `jobset.sigs.k8s.io/job-index` (JobSets).
//!
//! A JobSet pod carries both a job index (which child Job) and a completion index (which pod
//! of that Job). Such pods sort by the pair (job index, completion index), which is the order of
//! `job_index * parallelism + completion_index` without needing to know the parallelism. The
//! number reported as [`PodNode::index`](super::allocation::PodNode::index) for them is exactly that
//! product, with the parallelism taken as one more than the largest completion index among
//! the allocated JobSet pods.
//!
//! Pods with an index come before pods without one. Pods without an index, and ties, are
//! ordered by natural name order (digit runs compare as numbers, so `worker-10` follows
//! `worker-9`), then by plain name.

use std::cmp::Ordering;
use std::collections::BTreeMap;

pub use super::keys::JOB_COMPLETION_INDEX;
pub(crate) use super::keys::{
    JOBSET_JOB_GLOBAL_INDEX, JOBSET_JOB_INDEX, NODE_GROUP_ANNOTATION, STATEFULSET_POD_INDEX,
};
use super::record::PodRecord;

/// The index of a pod within its workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PodIndex {
    /// One index (Job completion index, StatefulSet ordinal, or JobSet job index alone).
    Single(u64),
    /// A JobSet pod: (job index, completion index within that job).
    Pair(u64, u64),
}

impl PodIndex {
    fn sort_key(&self) -> (u64, u64) {
        match *self {
            PodIndex::Single(i) => (0, i),
            PodIndex::Pair(j, c) => (j, c),
        }
    }
}

fn lookup(pod: &PodRecord, key: &str) -> Option<u64> {
    let from = |m: &Option<BTreeMap<String, String>>| {
        m.as_ref()
            .and_then(|m| m.get(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    from(&pod.metadata.labels).or_else(|| from(&pod.metadata.annotations))
}

/// Reads a pod's workload index from its labels or annotations.
pub fn pod_index(pod: &PodRecord) -> Option<PodIndex> {
    let completion = lookup(pod, JOB_COMPLETION_INDEX);
    let jobset_job = lookup(pod, NODE_GROUP_ANNOTATION)
        .or_else(|| lookup(pod, JOBSET_JOB_GLOBAL_INDEX))
        .or_else(|| lookup(pod, JOBSET_JOB_INDEX));
    match (jobset_job, completion) {
        (Some(j), Some(c)) => Some(PodIndex::Pair(j, c)),
        (None, Some(c)) => Some(PodIndex::Single(c)),
        (j, None) => lookup(pod, STATEFULSET_POD_INDEX)
            .or(j)
            .map(PodIndex::Single),
    }
}

/// Natural order: runs of digits compare numerically, everything else byte-wise.
pub(crate) fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let si = i;
            while i < a.len() && a[i].is_ascii_digit() {
                i += 1;
            }
            let sj = j;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let na = trim_zeros(&a[si..i]);
            let nb = trim_zeros(&b[sj..j]);
            let ord = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
            if ord != Ordering::Equal {
                return ord;
            }
        } else {
            let ord = a[i].cmp(&b[j]);
            if ord != Ordering::Equal {
                return ord;
            }
            i += 1;
            j += 1;
        }
    }
    (a.len() - i).cmp(&(b.len() - j))
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let n = d.iter().take_while(|c| **c == b'0').count();
    &d[n..]
}

fn name(pod: &PodRecord) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

/// Compares two pods for allocation order.
#[cfg(test)]
pub(crate) fn compare_pods(a: &PodRecord, b: &PodRecord) -> Ordering {
    let by_index = match (pod_index(a), pod_index(b)) {
        (Some(x), Some(y)) => x.sort_key().cmp(&y.sort_key()),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    by_index
        .then_with(|| natural_cmp(name(a), name(b)))
        .then_with(|| name(a).cmp(name(b)))
}

/// Sorts pods into allocation order.
#[cfg(test)]
pub(crate) fn sort_pods(pods: &mut [PodRecord]) {
    sort_pods_by(pods, |p| p);
}

/// A pod's place in allocation order as a value: keys compare as [`compare_pods`] compares
/// their pods, so a sorted set of them (a `BTreeSet<OrderKey>`) keeps pods in allocation order
/// as they come and go, each change costing O(log n) instead of a re-sort.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct OrderKey {
    index: Option<(u64, u64)>,
    name: String,
}

impl OrderKey {
    /// The key of a pod (its index read once).
    pub fn of(pod: &PodRecord) -> OrderKey {
        OrderKey {
            index: pod_index(pod).map(|i| i.sort_key()),
            name: name(pod).to_string(),
        }
    }

    /// A key ordering by name alone (natural order, then plain), as for pods without an index.
    pub(crate) fn by_name(name: &str) -> OrderKey {
        OrderKey {
            index: None,
            name: name.to_string(),
        }
    }

    /// The pod's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Ord for OrderKey {
    fn cmp(&self, other: &Self) -> Ordering {
        let by_index = match (self.index, other.index) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_index
            .then_with(|| natural_cmp(&self.name, &other.name))
            .then_with(|| self.name.cmp(&other.name))
    }
}

impl PartialOrd for OrderKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Sorts items holding pods into allocation order (as [`compare_pods`]), reading each pod's
/// index once rather than at every comparison.
pub(crate) fn sort_pods_by<T>(items: &mut [T], pod: impl Fn(&T) -> &PodRecord) {
    let keys: Vec<OrderKey> = items.iter().map(|t| OrderKey::of(pod(t))).collect();
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
    // Apply the permutation in place: position i takes the item at order[i].
    let mut at: Vec<usize> = (0..items.len()).collect(); // at[k] = where original item k is now
    let mut holds: Vec<usize> = (0..items.len()).collect(); // holds[i] = original item at i
    for (i, &want) in order.iter().enumerate() {
        let from = at[want];
        if from != i {
            items.swap(i, from);
            let displaced = holds[i];
            holds.swap(i, from);
            at[displaced] = from;
            at[want] = i;
        }
    }
}

/// The number reported as each pod's index, for pods already in allocation order.
pub(crate) fn reported_indices(pods: &[PodRecord]) -> Vec<Option<u64>> {
    let indices: Vec<Option<PodIndex>> = pods.iter().map(pod_index).collect();
    let stride = indices
        .iter()
        .filter_map(|i| match i {
            Some(PodIndex::Pair(_, c)) => Some(c.saturating_add(1)),
            _ => None,
        })
        .max()
        .unwrap_or(1);
    indices
        .into_iter()
        .map(|i| {
            i.map(|i| match i {
                PodIndex::Single(n) => n,
                PodIndex::Pair(j, c) => j.saturating_mul(stride).saturating_add(c),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> PodRecord {
        let mut p = PodRecord::default();
        p.metadata.name = Some(name.into());
        let m = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
        };
        p.metadata.labels = m(labels);
        p.metadata.annotations = m(annotations);
        p
    }

    fn names(pods: &[PodRecord]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn sorting_with_keys_read_once_equals_sorting_by_comparison() {
        let mut pods = Vec::new();
        for i in 0..60u64 {
            // A mix: completion indices, jobset pairs, statefulset ordinals, bare names, and
            // equal keys decided by the name.
            let k = (i * 37) % 60;
            let (ci, jj, name) = (
                (k % 7).to_string(),
                (k % 3).to_string(),
                format!("w-{}", (k * 13) % 17),
            );
            let p = match k % 4 {
                0 => pod(&name, &[(JOB_COMPLETION_INDEX, &ci)], &[]),
                1 => pod(
                    &name,
                    &[(JOB_COMPLETION_INDEX, &ci), (JOBSET_JOB_INDEX, &jj)],
                    &[],
                ),
                2 => pod(&name, &[], &[(STATEFULSET_POD_INDEX, &ci)]),
                _ => pod(&format!("{name}-{k}"), &[], &[]),
            };
            pods.push(p);
        }
        let mut by_cmp = pods.clone();
        by_cmp.sort_by(compare_pods);
        sort_pods(&mut pods);
        assert_eq!(names(&pods), names(&by_cmp));
        let mut refs: Vec<&PodRecord> = by_cmp.iter().rev().collect();
        sort_pods_by(&mut refs, |p| p);
        assert_eq!(
            refs.iter().map(|p| name(p).to_string()).collect::<Vec<_>>(),
            names(&by_cmp)
        );
    }

    #[test]
    fn twelve_workers_sort_numerically_by_name() {
        // Lexicographic order would put w-10 and w-11 right after w-1.
        let mut pods: Vec<PodRecord> = [3, 11, 0, 10, 1, 7, 2, 9, 5, 8, 4, 6]
            .iter()
            .map(|i| pod(&format!("w-{i}"), &[], &[]))
            .collect();
        sort_pods(&mut pods);
        let expected: Vec<String> = (0..12).map(|i| format!("w-{i}")).collect();
        assert_eq!(names(&pods), expected);
        assert_eq!(reported_indices(&pods), vec![None; 12]);
    }

    #[test]
    fn index_labels_beat_names() {
        // Indexed Job pods: the random suffix would order them wrongly.
        let mut pods = vec![
            pod("job-zzz", &[(JOB_COMPLETION_INDEX, "0")], &[]),
            pod("job-aaa", &[(JOB_COMPLETION_INDEX, "2")], &[]),
            pod("job-mmm", &[], &[(JOB_COMPLETION_INDEX, "10")]),
            pod("job-bbb", &[(JOB_COMPLETION_INDEX, "1")], &[]),
        ];
        sort_pods(&mut pods);
        assert_eq!(names(&pods), ["job-zzz", "job-bbb", "job-aaa", "job-mmm"]);
        assert_eq!(
            reported_indices(&pods),
            vec![Some(0), Some(1), Some(2), Some(10)]
        );
    }

    #[test]
    fn statefulset_ordinal_label() {
        let mut pods = vec![
            pod("b-9", &[(STATEFULSET_POD_INDEX, "1")], &[]),
            pod("a-1", &[(STATEFULSET_POD_INDEX, "0")], &[]),
        ];
        sort_pods(&mut pods);
        assert_eq!(names(&pods), ["a-1", "b-9"]);
    }

    #[test]
    fn indexed_pods_come_before_unindexed() {
        let mut pods = vec![
            pod("a", &[], &[]),
            pod("z", &[(STATEFULSET_POD_INDEX, "5")], &[]),
        ];
        sort_pods(&mut pods);
        assert_eq!(names(&pods), ["z", "a"]);
    }

    #[test]
    fn jobset_pairs_and_composite_index() {
        let js = |name: &str, job: &str, c: &str| {
            pod(
                name,
                &[(JOBSET_JOB_INDEX, job), (JOB_COMPLETION_INDEX, c)],
                &[],
            )
        };
        let mut pods = vec![
            js("x-1-0", "1", "0"),
            js("x-0-1", "0", "1"),
            js("x-1-1", "1", "1"),
            js("x-0-0", "0", "0"),
        ];
        sort_pods(&mut pods);
        assert_eq!(names(&pods), ["x-0-0", "x-0-1", "x-1-0", "x-1-1"]);
        assert_eq!(
            reported_indices(&pods),
            vec![Some(0), Some(1), Some(2), Some(3)]
        );
        // The global index, when present, overrides the per-replicated-job index.
        let g = pod(
            "y",
            &[(JOBSET_JOB_INDEX, "0"), (JOB_COMPLETION_INDEX, "0")],
            &[(JOBSET_JOB_GLOBAL_INDEX, "3")],
        );
        assert_eq!(pod_index(&g), Some(PodIndex::Pair(3, 0)));
        // A JobSet job index alone is a single index.
        assert_eq!(
            pod_index(&pod("z", &[(JOBSET_JOB_INDEX, "4")], &[])),
            Some(PodIndex::Single(4))
        );
    }

    #[test]
    fn an_mpijobs_launcher_comes_first_whichever_job_the_jobset_lists_first() {
        // Workers listed (and started) first: their Job's global index is 0, the launcher's 1.
        let p = |name: &str, global: &str, c: &str, group: &str| {
            pod(
                name,
                &[(JOBSET_JOB_GLOBAL_INDEX, global), (JOB_COMPLETION_INDEX, c)],
                &[(NODE_GROUP_ANNOTATION, group)],
            )
        };
        let mut pods = vec![
            p("pi-worker-0-1", "0", "1", "1"),
            p("pi-worker-0-0", "0", "0", "1"),
            p("pi-launcher-0-0", "1", "0", "0"),
        ];
        sort_pods(&mut pods);
        assert_eq!(
            names(&pods),
            ["pi-launcher-0-0", "pi-worker-0-0", "pi-worker-0-1"]
        );
        assert_eq!(
            pod_index(&pods[0]),
            Some(PodIndex::Pair(0, 0)),
            "the group replaces the global index"
        );
    }

    #[test]
    fn unparsable_index_is_ignored() {
        assert_eq!(
            pod_index(&pod("a", &[(JOB_COMPLETION_INDEX, "x")], &[])),
            None
        );
    }

    #[test]
    fn natural_order_details() {
        assert_eq!(natural_cmp("worker-9", "worker-10"), Ordering::Less);
        assert_eq!(natural_cmp("worker-10", "worker-9"), Ordering::Greater);
        assert_eq!(natural_cmp("a-2-b", "a-10-a"), Ordering::Less);
        assert_eq!(natural_cmp("a", "a-0"), Ordering::Less);
        assert_eq!(natural_cmp("w-01", "w-1"), Ordering::Equal);
        assert_eq!(
            natural_cmp("w-99999999999999999999999", "w-100000000000000000000000"),
            Ordering::Less
        );
        // Equal natural order still gives a total order through the plain name.
        let mut pods = vec![pod("w-1", &[], &[]), pod("w-01", &[], &[])];
        sort_pods(&mut pods);
        assert_eq!(names(&pods), ["w-01", "w-1"]);
    }
}
