//! Spawns a command N times into a DVM through one tool connection and prints each end:
//! `spawn URI LIBPMIX N CMD [ARGS...]` (`SPAWN_CAPTURE=1`: the tasks' output through the tool).
use std::sync::mpsc::channel;

use prrte_k8s_pmix_tool::{Dvm, Task, Update};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let [uri, lib, n, cmd @ ..] = a.as_slice() else {
        return Err("usage: spawn URI LIBPMIX N CMD [ARGS...]".into());
    };
    let capture = std::env::var_os("SPAWN_CAPTURE").is_some();
    let dvm = Dvm::connect_with(uri, lib.as_ref(), capture)?;
    let (tx, rx) = channel();
    let n: usize = n.parse()?;
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        dvm.submit_to(&Task::new(cmd.iter().cloned()), tx.clone())?;
    }
    let mut done = 0;
    while done < n {
        let (id, u) = rx.recv()?;
        if let Update::Output { bytes, .. } = &u {
            println!("{id}: output {:?}", String::from_utf8_lossy(bytes));
        } else if !matches!(u, Update::Started { .. }) {
            println!("{id}: {u:?}");
            done += 1;
        }
    }
    println!("{n} tasks in {:.2} s", t0.elapsed().as_secs_f64());
    Ok(())
}
