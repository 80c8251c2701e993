use super::*;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn the_output_dir_goes_after_prrtes_launcher_only() {
    let dir = Path::new("/tmp/r");
    assert_eq!(
        with_output_dir(&s(&["mpirun", "-n", "8", "./app"]), dir),
        Some(s(&["mpirun", "--output", "dir=/tmp/r", "-n", "8", "./app"]))
    );
    assert_eq!(
        with_output_dir(&s(&["/usr/bin/prterun", "./app"]), dir),
        Some(s(&["/usr/bin/prterun", "--output", "dir=/tmp/r", "./app"]))
    );
    // Not PRRTE's launcher, or an --output of the user's own: unchanged.
    assert_eq!(with_output_dir(&s(&["sh", "-c", "mpirun x"]), dir), None);
    assert_eq!(with_output_dir(&s(&["mpiexec.hydra", "x"]), dir), None);
    assert_eq!(
        with_output_dir(&s(&["mpirun", "--output", "tag", "x"]), dir),
        None
    );
    assert_eq!(
        with_output_dir(&s(&["mpirun", "--output=tag", "x"]), dir),
        None
    );
    assert_eq!(
        with_output_dir(&s(&["mpirun", "--output-filename", "o", "x"]), dir),
        None
    );
    assert_eq!(with_output_dir(&[], dir), None);
}

#[test]
fn output_files_name_their_rank_and_stream() {
    let p = |d: &str, f: &str| parse_path(OsStr::new(d), OsStr::new(f));
    assert_eq!(p("rank.3", "stdout"), Some((3, Stream::Stdout)));
    assert_eq!(p("rank.007", "stderr"), Some((7, Stream::Stderr)));
    assert_eq!(p("rank.x", "stdout"), None);
    assert_eq!(p("rank.1", "stdin"), None);
    assert_eq!(p("proc.1", "stdout"), None);
}

#[test]
fn lines_are_prefixed_whole_and_an_unfinished_one_is_held() {
    let mut l = Lines::new(2);
    assert_eq!(l.push(b"hel"), b"");
    assert_eq!(l.push(b"lo\nwor"), b"[rank 2] hello\n");
    assert_eq!(l.push(b"ld\n\n"), b"[rank 2] world\n[rank 2] \n");
    assert_eq!(l.push(b"tail"), b"");
    assert_eq!(l.finish(), b"[rank 2] tail\n");
    assert_eq!(l.finish(), b"");
}

#[test]
fn a_very_long_line_is_written_in_prefixed_parts() {
    let mut l = Lines::new(0);
    let out = l.push(&vec![b'x'; MAX_LINE + 10]);
    assert_eq!(out.len(), "[rank 0] ".len() + MAX_LINE + 1);
    assert_eq!(
        l.finish(),
        format!("[rank 0] {}\n", "x".repeat(10)).into_bytes()
    );
}

#[test]
fn the_follower_writes_each_ranks_lines_in_order_to_its_stream() {
    let dir = tempfile::tempdir().unwrap();
    let rank = |r: &str| {
        let d = dir.path().join("prterun-pod-1@1").join(r);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let r1 = rank("rank.1");
    let r4 = rank("rank.4");
    let mut f = Follower::new(dir.path().to_path_buf(), Vec::new(), Vec::new());
    std::fs::write(r1.join("stdout"), "a\nb").unwrap();
    std::fs::write(r4.join("stderr"), "oops\n").unwrap();
    assert_eq!(f.pass(), 8);
    let mut more = std::fs::OpenOptions::new()
        .append(true)
        .open(r1.join("stdout"))
        .unwrap();
    more.write_all(b"c\nd").unwrap();
    // A burst larger than one pass's chunk comes over several passes, in order.
    let big: String = (0..200_000).map(|i| format!("{i}\n")).collect();
    std::fs::write(r4.join("stdout"), &big).unwrap();
    f.drain();
    let out = String::from_utf8(f.out.clone()).unwrap();
    let err = String::from_utf8(f.err.clone()).unwrap();
    assert_eq!(err, "[rank 4] oops\n");
    let mine: Vec<&str> = out.lines().filter(|l| l.starts_with("[rank 1]")).collect();
    assert_eq!(mine, ["[rank 1] a", "[rank 1] bc", "[rank 1] d"]);
    let four: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("[rank 4] ").map(String::from))
        .collect();
    assert_eq!(four.len(), 200_000);
    assert!(four.iter().enumerate().all(|(i, l)| *l == i.to_string()));
}
