use super::*;

fn scan(text: &str) -> Option<RankFailure> {
    let mut s = FailureScan::default();
    for l in text.lines() {
        s.line(l);
    }
    s.found().cloned()
}

#[test]
fn a_non_zero_exit_names_the_rank_and_code() {
    // As PRRTE 3.0.8's prterun prints it (help-prun.txt, prun:non-zero-exit).
    let text = "--------------------------------------------------------------------------\n\
prterun detected that one or more processes exited with non-zero status,\n\
thus causing the job to be terminated. The first process to do so was:\n\
\n\
   Process name: [prterun-vm-10640@1,2]\n\
   Exit code:    7\n\
--------------------------------------------------------------------------\n";
    let f = scan(text).unwrap();
    assert_eq!(
        f,
        RankFailure {
            rank: 2,
            node: None,
            ended: Ended::Code(7)
        }
    );
    assert_eq!(
        f.describe(Some("pi-2-x")),
        "rank 2 in pod pi-2-x exited with code 7"
    );
    assert_eq!(f.describe(None), "rank 2 exited with code 7");
}

#[test]
fn a_signal_names_the_rank_node_and_signal() {
    let text = "prterun noticed that process rank 1 with PID 10726 on node pi-1 exited on\n\
signal 9 (Killed).\n";
    let f = scan(text).unwrap();
    assert_eq!(
        f,
        RankFailure {
            rank: 1,
            node: Some("pi-1".into()),
            ended: Ended::Signal {
                number: 9,
                name: Some("Killed".into())
            }
        }
    );
    assert_eq!(
        f.describe(None),
        "rank 1 on host pi-1 was killed by signal 9 (Killed)"
    );
    assert_eq!(
        scan("mpirun noticed that process rank 3 with PID 1 on node h exited on\nsignal 6.\n")
            .unwrap()
            .ended,
        Ended::Signal {
            number: 6,
            name: None
        }
    );
}

#[test]
fn an_exit_without_finalize_and_only_the_first_failure() {
    let text =
        "prterun has exited due to process rank 4 with PID 0 on node pi-2 exiting improperly.\n\
mpirun noticed that process rank 4 with PID 77 on node pi-2 exited without calling \"finalize\"\n\
   Process name: [x@1,5]\n\
   Exit code:    1\n";
    let f = scan(text).unwrap();
    assert_eq!(f.rank, 4);
    assert_eq!(f.ended, Ended::WithoutFinalize);
    assert_eq!(
        f.describe(Some("p")),
        "rank 4 in pod p exited without calling MPI_Finalize"
    );
    assert_eq!(
        scan("hello\n   Process name: nonsense\n   Exit code: 3\n"),
        None
    );
}

const MAP: &str = "\n========================   JOB MAP   ========================\n\
Data for JOB prterun-pi-0-12@1 offset 0 Total slots allocated 3\n\
    Mapping policy: BYNODE  Ranking policy: NODE Binding policy: NONE\n\
\n\
Data for node: pi-0\tNum slots: 1\tMax slots: 0\tNum procs: 1\n\
        Process jobid: prterun-pi-0-12@1 App: 0 Process rank: 0 Bound: N/A\n\
\n\
Data for node: pi-1\tNum slots: 1\tMax slots: 0\tNum procs: 2\n\
        Process jobid: prterun-pi-0-12@1 App: 0 Process rank: 1 Bound: N/A\n\
        Process jobid: prterun-pi-0-12@1 App: 0 Process rank: 2 Bound: N/A\n\
\n\
=============================================================\n";

#[test]
fn the_map_is_read_and_kept_out_of_the_log_whatever_the_chunks() {
    let text = format!("before\n\n{MAP}hello from rank 0\n\npartial");
    let want = "before\n\nhello from rank 0\n\npartial";
    for size in [1, 3, 7, 64, 4096] {
        let mut f = MapFilter::default();
        let mut out = Vec::new();
        for chunk in text.as_bytes().chunks(size) {
            out.extend(f.push(chunk));
        }
        out.extend(f.finish());
        assert_eq!(String::from_utf8(out).unwrap(), want, "chunks of {size}");
        assert_eq!(f.node_of(0), Some("pi-0"));
        assert_eq!(f.node_of(2), Some("pi-1"));
        assert_eq!(f.node_of(3), None);
        assert!(f.complete(), "chunks of {size}");
    }
}

#[test]
fn a_line_start_goes_out_at_once_unless_it_may_open_the_map() {
    let mut f = MapFilter::default();
    assert_eq!(f.push(b"progress 10%"), b"progress 10%");
    assert_eq!(f.push(b" 20%\n===="), b" 20%\n");
    assert_eq!(f.push(b"x\n"), b"====x\n");
    assert!(!f.complete(), "no map was read");
}

#[test]
fn a_display_of_the_commands_own_is_seen() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert!(displays(&s(&["mpirun", "--display", "map", "x"])));
    assert!(displays(&s(&["mpirun", "--display=allocation", "x"])));
    assert!(!displays(&s(&["mpirun", "-n", "2", "x"])));
}
