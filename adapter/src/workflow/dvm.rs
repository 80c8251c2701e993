//! [`Dvm`]: many tasks through one PMIx tool connection to the job's DVM, as a library. Each
//! [`Dvm::submit`] is a future of the task's [`TaskResult`] (the results file's line);
//! [`Dvm::map`] runs many with a bound on how many are in flight. `prrte-k8s submit` and the
//! Python module are built on it.

use std::path::PathBuf;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::oneshot;

use super::engine::{Engine, Ev, Spawner, Stats};
use super::error::Error;
use super::find::{dvm_uri_file, libpmix, read_dvm_uri};
use super::results::TaskResult;
use super::tasks::TaskLine;
use super::timing::PhaseTimes;
use crate::protocol::validate_dvm_uri;

/// How to connect: every field may be left to its default.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The DVM's URI (`<nspace>.<rank>;tcp4://<ip>:<port>`); `None`: read from `uri_file`.
    pub uri: Option<String>,
    /// The published DVM URI file; `None`: `$PRRTE_K8S_DVM_URI_FILE`, else its default (where
    /// `prrte-k8s prun` looks).
    pub uri_file: Option<PathBuf>,
    /// libpmix; `None`: the PRRTE install's (`$PRRTE_K8S_PREFIX/lib/libpmix.so.2`), else the
    /// dynamic loader's.
    pub libpmix: Option<PathBuf>,
    /// Keep each task's standard output and error in `DIR/<index>.out` and `.err` (forwarded by
    /// the DVM) instead of this process's own.
    pub output: Option<PathBuf>,
}

/// What submits tasks to the engine thread: cheap to clone, owned by the futures it makes.
#[derive(Clone)]
struct Submitter(Sender<Ev>);

impl Submitter {
    fn submit(
        &self,
        task: TaskLine,
    ) -> impl std::future::Future<Output = Result<TaskResult, Error>> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        let sent = self.0.send(Ev::Submit { task, reply }).is_ok();
        async move {
            if !sent {
                return Err(Error::Stopped);
            }
            rx.await.unwrap_or(Err(Error::Stopped))
        }
    }
}

/// A PMIx tool connection to the job's DVM (one per process, PMIx's rule) and the thread that
/// runs tasks through it. Dropping it closes the connection; tasks still running are then
/// ended by the DVM, as a lost tool's are.
///
/// ```no_run
/// use futures::StreamExt;
/// use prrte_k8s::workflow::{parse_tasks, Dvm, TaskLine};
///
/// # async fn example() -> Result<(), prrte_k8s::workflow::Error> {
/// // In a pod of the job: the DVM found as `prrte-k8s prun` finds it.
/// let dvm = Dvm::connect()?;
/// let one = dvm.submit(TaskLine::command(0, ["hostname"])).await?;
/// println!("exit {:?} on {:?}", one.exit, one.pods);
///
/// let tasks = parse_tasks("/bin/true\n-n 2 hostname\nsh -c 'exit 3'\n").expect("a task list");
/// let mut results = dvm.map(tasks, 16);
/// while let Some(r) = results.next().await {
///     println!("{}", r?.to_line()); // the results file's line, in the order tasks end
/// }
/// # Ok(())
/// # }
/// ```
pub struct Dvm {
    submitter: Submitter,
    stats: Arc<Stats>,
    engine: Option<JoinHandle<()>>,
    forwarder: Option<JoinHandle<()>>,
    /// The PMIx tool connection, kept until the engine has ended.
    tool: Option<Box<dyn Send + Sync>>,
}

impl Dvm {
    /// Connects to the job's DVM as `prrte-k8s prun` finds it (the published URI file), with
    /// the PRRTE install's libpmix.
    pub fn connect() -> Result<Dvm, Error> {
        Self::connect_with(Options::default())
    }

    /// Connects to the DVM at `uri`.
    pub fn connect_uri(uri: &str) -> Result<Dvm, Error> {
        Self::connect_with(Options {
            uri: Some(uri.to_owned()),
            ..Options::default()
        })
    }

    pub fn connect_with(opts: Options) -> Result<Dvm, Error> {
        let uri = match opts.uri {
            Some(u) => {
                validate_dvm_uri(&u)?;
                u
            }
            None => read_dvm_uri(&opts.uri_file.unwrap_or_else(dvm_uri_file))?,
        };
        let lib = opts.libpmix.unwrap_or_else(libpmix);
        let capture = opts.output.is_some();
        let tool = Arc::new(prrte_k8s_pmix_tool::Dvm::connect_with(&uri, &lib, capture)?);
        Self::start(tool.clone(), Some(Box::new(tool)), opts.output)
    }

    /// The engine thread over `spawner`; `tool` (the connection) is dropped after it ends.
    pub(crate) fn start<S: Spawner>(
        spawner: S,
        tool: Option<Box<dyn Send + Sync>>,
        output: Option<PathBuf>,
    ) -> Result<Dvm, Error> {
        let (ev_tx, ev_rx) = channel();
        let (up_tx, up_rx) = channel();
        let stats = Arc::new(Stats::default());
        let engine = Engine::new(spawner, up_tx, output, stats.clone());
        let forward = ev_tx.clone();
        // The connection's updates into the engine's one channel (it ends with the connection).
        let forwarder = std::thread::Builder::new()
            .name("workflow-updates".into())
            .spawn(move || {
                for (id, u) in up_rx {
                    if forward.send(Ev::Update(id, u)).is_err() {
                        break;
                    }
                }
            })
            .map_err(Error::Thread)?;
        let engine = std::thread::Builder::new()
            .name("workflow".into())
            .spawn(move || engine.run(ev_rx))
            .map_err(Error::Thread)?;
        Ok(Dvm {
            submitter: Submitter(ev_tx),
            stats,
            engine: Some(engine),
            forwarder: Some(forwarder),
            tool,
        })
    }

    /// Spawns `task` now (the future need not be polled for it to run) and resolves to its
    /// result once it ends: its exit, when it was spawned and ended, the pods its ranks ran in.
    /// A task past its `timeout` is killed and reported as [`Exit::Timeout`](super::Exit).
    /// [`Error::NotStarted`] when the connection was lost before it was spawned. Dropping the
    /// future does not end the task.
    pub fn submit(
        &self,
        task: TaskLine,
    ) -> impl std::future::Future<Output = Result<TaskResult, Error>> + Send + 'static {
        self.submitter.submit(task)
    }

    /// Runs `tasks`, at most `max_in_flight` (at least 1) spawned or running at once, and
    /// yields each one's result in the order they end. A task is taken from `tasks` only when
    /// there is room for it.
    pub fn map<I>(
        &self,
        tasks: I,
        max_in_flight: usize,
    ) -> impl Stream<Item = Result<TaskResult, Error>> + Send + 'static
    where
        I: IntoIterator<Item = TaskLine>,
        I::IntoIter: Send + 'static,
    {
        let s = self.submitter.clone();
        futures::stream::iter(tasks)
            .map(move |t| s.submit(t))
            .buffer_unordered(max_in_flight.max(1))
    }

    /// Tasks spawned whose end is not known yet.
    pub fn running(&self) -> usize {
        self.stats
            .running
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Where the time of the tasks that ran to their end went so far (spawn answered, launch to
    /// end, request to result).
    pub fn phase_times(&self) -> PhaseTimes {
        self.stats
            .times
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Waits (blocking) until no task output has arrived for `quiet`: output forwarded after a
    /// task's end is written before the caller goes on. Only useful with
    /// [`Options::output`].
    pub fn wait_output_quiet(&self, quiet: Duration) {
        let (tx, rx) = channel();
        if self
            .submitter
            .0
            .send(Ev::Quiet { quiet, reply: tx })
            .is_ok()
        {
            let _ = rx.recv();
        }
    }
}

impl Drop for Dvm {
    fn drop(&mut self) {
        let _ = self.submitter.0.send(Ev::Stop);
        if let Some(h) = self.engine.take() {
            let _ = h.join();
        }
        // The engine is gone: ours is the last reference; dropping it finalizes PMIx, which
        // ends the updates and so the forwarder.
        drop(self.tool.take());
        if let Some(h) = self.forwarder.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests;
