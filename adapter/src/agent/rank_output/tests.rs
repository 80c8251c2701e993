use super::*;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn the_output_tag_goes_after_prrtes_launcher_only() {
    assert_eq!(
        with_output_tag(&s(&["mpirun", "-n", "8", "./app"])),
        Some(s(&["mpirun", "--output", "tag", "-n", "8", "./app"]))
    );
    assert_eq!(
        with_output_tag(&s(&["/usr/bin/prterun", "./app"])),
        Some(s(&["/usr/bin/prterun", "--output", "tag", "./app"]))
    );
    // Not PRRTE's launcher, or an --output of the user's own: unchanged.
    assert_eq!(with_output_tag(&s(&["sh", "-c", "mpirun x"])), None);
    assert_eq!(with_output_tag(&s(&["mpiexec.hydra", "x"])), None);
    assert_eq!(
        with_output_tag(&s(&["mpirun", "--output", "dir=/o", "x"])),
        None
    );
    assert_eq!(with_output_tag(&s(&["mpirun", "--output=tag", "x"])), None);
    assert_eq!(
        with_output_tag(&s(&["mpirun", "--output-filename", "o", "x"])),
        None
    );
    assert_eq!(with_output_tag(&[]), None);
}

#[test]
fn tags_name_the_rank_and_stream() {
    assert_eq!(
        parse_tag(b"[1,3]<stdout>: hello\n"),
        Some((3, Stream::Stdout, 15))
    );
    assert_eq!(
        parse_tag(b"[2,17]<stderr>: x"),
        Some((17, Stream::Stderr, 16))
    );
    assert_eq!(
        parse_tag(b"[1,0]<stddiag>: x"),
        Some((0, Stream::Stderr, 16))
    );
    // mpirun's own lines, and a rank's text that only looks like a tag's start.
    assert_eq!(parse_tag(b"prterun detected that"), None);
    assert_eq!(parse_tag(b"[1,x]<stdout>: a"), None);
    assert_eq!(parse_tag(b"[1,2] <stdout>: a"), None);
    assert_eq!(parse_tag(b"[1,2]<stdout>:a"), None);
    assert_eq!(parse_tag(b"[12]<stdout>: a"), None);
}

fn texts(pieces: &[Piece]) -> Vec<(Option<(u32, Stream)>, String)> {
    pieces
        .iter()
        .map(|p| (p.from, String::from_utf8_lossy(&p.text).into_owned()))
        .collect()
}

#[test]
fn untag_gives_whole_lines_without_their_tags() {
    let mut u = Untag::default();
    let out = Some((1, Stream::Stdout));
    assert!(u.push(b"[1,1]<std").is_empty());
    assert_eq!(
        texts(&u.push(b"out>: hello\nprterun says\n[1,2]<stderr>: oops\n[1,1]<stdout>: no end")),
        [
            (out, "hello\n".to_owned()),
            (None, "prterun says\n".to_owned()),
            (Some((2, Stream::Stderr)), "oops\n".to_owned()),
        ]
    );
    // An unfinished last line comes out at the end, without a newline added.
    assert_eq!(texts(&[u.finish().unwrap()]), [(out, "no end".to_owned())]);
    assert_eq!(u.finish(), None);
}

#[test]
fn untag_gives_a_very_long_line_in_parts_of_the_same_rank() {
    let mut u = Untag::default();
    let mut data = b"[1,4]<stdout>: ".to_vec();
    data.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
    data.extend_from_slice(b"\n[1,5]<stdout>: y\n");
    let pieces = u.push(&data);
    assert_eq!(pieces.len(), 3, "{:?}", texts(&pieces));
    let four = Some((4, Stream::Stdout));
    assert_eq!(pieces[0].from, four);
    assert_eq!(pieces[1].from, four);
    let whole: usize = pieces[..2].iter().map(|p| p.text.len()).sum();
    assert_eq!(whole, MAX_LINE + 11);
    assert_eq!(
        texts(&pieces[2..]),
        [(Some((5, Stream::Stdout)), "y\n".to_owned())]
    );
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
fn the_rank_log_writes_each_ranks_lines_in_order_to_its_stream_and_the_unfinished_at_the_end() {
    let mut log = RankLog::new(Vec::new(), Vec::new());
    log.push(1, Stream::Stdout, b"a\nb");
    log.push(4, Stream::Stderr, b"oops\n");
    log.push(4, Stream::Stdout, b"x");
    log.push(1, Stream::Stdout, b"c\nd");
    // The last lines of both ranks have no newline: written only when the job ends.
    assert_eq!(
        String::from_utf8_lossy(&log.out),
        "[rank 1] a\n[rank 1] bc\n"
    );
    log.finish();
    assert_eq!(
        String::from_utf8_lossy(&log.out),
        "[rank 1] a\n[rank 1] bc\n[rank 1] d\n[rank 4] x\n"
    );
    assert_eq!(String::from_utf8_lossy(&log.err), "[rank 4] oops\n");
}

#[test]
fn streams_travel_as_file_descriptors() {
    for s in [Stream::Stdout, Stream::Stderr] {
        assert_eq!(Stream::from_fd(s.fd()), Some(s));
    }
    assert_eq!(Stream::from_fd(0), None);
    assert_eq!(Stream::from_fd(3), None);
}
