use super::*;
use crate::protocol::exec::encode_data;
use crate::protocol::Request;

fn chunk(rank: u32, stream: Stream, data: &str) -> Chunk {
    Chunk {
        rank,
        stream,
        data: data.as_bytes().to_vec(),
    }
}

const MAP: &str = "\n========================   JOB MAP   ========================\n\
Data for node: pi-0\tNum slots: 1\tMax slots: 0\tNum procs: 1\n\
        Process jobid: prterun-pi-0-12@1 App: 0 Process rank: 0 Bound: N/A\n\
Data for node: pi-1\tNum slots: 1\tMax slots: 0\tNum procs: 2\n\
        Process jobid: prterun-pi-0-12@1 App: 0 Process rank: 1 Bound: N/A\n\
        Process jobid: prterun-pi-0-12@1 App: 0 Process rank: 2 Bound: N/A\n\
=============================================================\n";

fn drained(rx: &mut UnboundedReceiver<Chunk>) -> Vec<Chunk> {
    let mut v = Vec::new();
    while let Ok(c) = rx.try_recv() {
        v.push(c);
    }
    v
}

#[test]
fn output_before_the_map_waits_for_it_and_keeps_each_ranks_order() {
    let (tx, mut rx) = unbounded_channel();
    let router = Router::with_pods([("pi-1".to_owned(), tx)].into());
    let map = Mutex::new(MapFilter::default());
    // The stderr relay may read a rank's line before the stdout relay has read the map.
    router.send(chunk(2, Stream::Stderr, "early\n"), &map);
    router.send(chunk(0, Stream::Stdout, "pod 0's own\n"), &map);
    assert!(drained(&mut rx).is_empty(), "nothing is known yet");
    map.lock().unwrap().push(MAP.as_bytes());
    router.send(chunk(2, Stream::Stderr, "later\n"), &map);
    router.send(chunk(1, Stream::Stdout, "one\n"), &map);
    // A rank no map names, once the map is whole: nowhere.
    router.send(chunk(9, Stream::Stdout, "nine\n"), &map);
    assert_eq!(
        drained(&mut rx),
        [
            chunk(2, Stream::Stderr, "early\n"),
            chunk(2, Stream::Stderr, "later\n"),
            chunk(1, Stream::Stdout, "one\n"),
        ],
        "rank 0 is on this pod: its output stays in this pod's log only"
    );
    router.flush_pending(&map);
    assert!(drained(&mut rx).is_empty());
    assert!(router.pending.lock().unwrap().chunks.is_empty());
}

#[test]
fn output_waiting_for_a_map_that_never_comes_is_bounded() {
    let (tx, mut rx) = unbounded_channel();
    let router = Router::with_pods([("pi-1".to_owned(), tx)].into());
    let map = Mutex::new(MapFilter::default());
    let big = "x".repeat(1 << 20);
    for _ in 0..(PENDING_LIMIT >> 20) + 2 {
        router.send(chunk(1, Stream::Stdout, &big), &map);
    }
    let pending = router.pending.lock().unwrap();
    assert!(pending.overflowed);
    assert!(pending.bytes <= PENDING_LIMIT, "{}", pending.bytes);
    drop(pending);
    assert!(drained(&mut rx).is_empty());
}

#[test]
fn adjacent_pieces_of_a_rank_travel_together_within_a_frames_bound() {
    let out = coalesce(vec![
        chunk(1, Stream::Stdout, "a\n"),
        chunk(1, Stream::Stdout, "b\n"),
        chunk(1, Stream::Stderr, "c\n"),
        chunk(2, Stream::Stderr, "d\n"),
        chunk(2, Stream::Stderr, "e\n"),
    ]);
    assert_eq!(
        out,
        [
            chunk(1, Stream::Stdout, "a\nb\n"),
            chunk(1, Stream::Stderr, "c\n"),
            chunk(2, Stream::Stderr, "d\ne\n"),
        ]
    );
    let long = "y".repeat(FRAME_DATA * 2 + 5);
    let out = coalesce(vec![
        chunk(3, Stream::Stdout, "z"),
        chunk(3, Stream::Stdout, &long),
    ]);
    assert_eq!(out.len(), 3);
    assert!(out.iter().all(|c| c.data.len() <= FRAME_DATA));
    let joined: Vec<u8> = out.into_iter().flat_map(|c| c.data).collect();
    assert_eq!(joined, format!("z{long}").into_bytes());
}

#[test]
fn a_full_frame_fits_the_smallest_max_frame() {
    let request = Request::RankOutput {
        rank: u32::MAX,
        fd: 2,
        data: encode_data(&vec![0xff; FRAME_DATA]),
    };
    let body = crate::protocol::encode_message(&request);
    // The sealed frame adds its tag and length to the body.
    assert!(
        body.len() + 64 <= crate::agent::config::MIN_MAX_FRAME,
        "{}",
        body.len()
    );
}
