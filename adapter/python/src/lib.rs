//! The Python module `prrte_k8s`: many tasks through the job's DVM from Python, over
//! `prrte_k8s::workflow::Dvm` (one PMIx tool connection; libpmix loaded when connecting, from
//! `$PRRTE_K8S_PREFIX/lib` as `prrte-k8s submit` loads it, else from the dynamic loader's path).
//!
//! ```python
//! import prrte_k8s
//! dvm = prrte_k8s.connect()
//! for r in dvm.map(["hostname", "-n 2 /bin/true", ["sh", "-c", "exit 3"]]):
//!     print(r.index, r.exit, r.pods)
//! ```
//!
//! A task is a task list's line (`"-n 2 --timeout 60 ./step arg"`, the options of
//! `prrte-k8s submit --tasks`) or a list of the command's words. A result has the results
//! file's fields: `index` (the task's position), `exit` (an int, 0 on success, or a string:
//! a signal name, `"timeout"`, `"lost"`, PMIx's name of why it could not start), `start`,
//! `end`, `pods`, `error`; `ok` is true when `exit == 0`; `json()` is the results file's line.

#![deny(unsafe_code)]

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use prrte_k8s::workflow::{
    exit_label, parse_tasks, Dvm, Error, Exit, Options, TaskLine, TaskResult,
};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// How often a wait looks for a pending signal (Ctrl-C in a notebook or a terminal).
const SIGNAL_CHECK: Duration = Duration::from_millis(200);

/// One task's end, as a line of `prrte-k8s submit`'s results file.
#[pyclass(name = "Result", module = "prrte_k8s", frozen)]
struct PyTaskResult {
    r: TaskResult,
}

#[pymethods]
impl PyTaskResult {
    /// The task's position in the list given (from 0).
    #[getter]
    fn index(&self) -> usize {
        self.r.index
    }

    /// The exit status (an int), or why the task did not exit by itself (a string).
    #[getter]
    fn exit(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match &self.r.exit {
            Exit::Status(n) => n.into_pyobject(py)?.into_any().unbind(),
            other => exit_label(other).into_pyobject(py)?.into_any().unbind(),
        })
    }

    /// When it was spawned (RFC 3339).
    #[getter]
    fn start(&self) -> String {
        self.r.start.clone()
    }

    /// When its end was known (RFC 3339).
    #[getter]
    fn end(&self) -> String {
        self.r.end.clone()
    }

    /// The pods its ranks ran in, in rank order.
    #[getter]
    fn pods(&self) -> Vec<String> {
        self.r.pods.clone()
    }

    /// PRRTE's message about an abnormal end, if any.
    #[getter]
    fn error(&self) -> Option<String> {
        self.r.error.clone()
    }

    /// True when the task exited with status 0.
    #[getter]
    fn ok(&self) -> bool {
        self.r.exit.success()
    }

    /// The results file's JSON line.
    fn json(&self) -> String {
        self.r.to_line()
    }

    fn __repr__(&self) -> String {
        format!(
            "Result(index={}, exit={}, pods={:?})",
            self.r.index,
            match &self.r.exit {
                Exit::Status(n) => n.to_string(),
                other => format!("{:?}", exit_label(other)),
            },
            self.r.pods
        )
    }
}

/// A task the DVM never started (the connection was lost first): a result of `exit == "lost"`.
fn not_started(index: usize) -> TaskResult {
    let now = jiff::Timestamp::now().to_string();
    TaskResult {
        index,
        exit: Exit::Lost,
        start: now.clone(),
        end: now,
        pods: vec![],
        error: Some("not started: the connection to the DVM was lost".into()),
    }
}

fn result(r: Result<TaskResult, Error>) -> PyResult<PyTaskResult> {
    match r {
        Ok(r) => Ok(PyTaskResult { r }),
        Err(Error::NotStarted(i)) => Ok(PyTaskResult { r: not_started(i) }),
        Err(e) => Err(PyConnectionError::new_err(e.to_string())),
    }
}

/// A Python task: a task list's line (`None` for a blank or comment line, which is no task)
/// or the command's words; the `index`th task.
fn task(item: &Bound<'_, PyAny>, index: usize, timeout: Option<f64>) -> PyResult<Option<TaskLine>> {
    let mut t = if let Ok(line) = item.extract::<String>() {
        let mut ts = parse_tasks(&line).map_err(|e| PyValueError::new_err(e.why))?;
        match ts.len() {
            0 => return Ok(None),
            1 => {}
            _ => {
                return Err(PyValueError::new_err(format!(
                    "task {index}: {line:?} holds more than one command line"
                )))
            }
        }
        let mut t = ts.remove(0);
        t.index = index;
        t.line = index + 1;
        t
    } else {
        let argv: Vec<String> = item.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "task {index}: expected a command line (str) or the command's words (list of str)"
            ))
        })?;
        if argv.is_empty() {
            return Err(PyValueError::new_err(format!("task {index}: no command")));
        }
        TaskLine::command(index, argv)
    };
    if let Some(s) = timeout {
        if !(s.is_finite() && s > 0.0) {
            return Err(PyValueError::new_err("timeout: expected seconds > 0"));
        }
        t.timeout = t.timeout.or(Some(Duration::from_secs_f64(s)));
    }
    Ok(Some(t))
}

fn runtime() -> PyResult<Runtime> {
    prrte_k8s::runtime::current_thread()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start a runtime: {e}")))
}

/// Waits for `fut` without holding the GIL, looking for signals (Ctrl-C) meanwhile.
fn wait<F: std::future::Future + Unpin + Send>(
    py: Python<'_>,
    rt: &Runtime,
    fut: &mut F,
) -> PyResult<F::Output>
where
    F::Output: Send,
{
    loop {
        // The timer is made inside the runtime (it needs the runtime's time driver).
        let waited = py
            .detach(|| rt.block_on(async { tokio::time::timeout(SIGNAL_CHECK, &mut *fut).await }));
        if let Ok(out) = waited {
            return Ok(out);
        }
        py.check_signals()?;
    }
}

/// A connection to the job's DVM (one per process).
#[pyclass(name = "Dvm", module = "prrte_k8s", frozen)]
struct PyDvm {
    dvm: Mutex<Option<Arc<Dvm>>>,
}

impl PyDvm {
    fn dvm(&self) -> PyResult<Arc<Dvm>> {
        self.dvm
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .ok_or_else(|| PyConnectionError::new_err("the connection to the DVM is closed"))
    }
}

type Results = Pin<Box<dyn Stream<Item = Result<TaskResult, Error>> + Send>>;

/// The results of `Dvm.map`, in the order the tasks end.
#[pyclass(name = "Results", module = "prrte_k8s", frozen)]
struct PyResults {
    stream: Mutex<Results>,
    rt: Runtime,
    /// Keeps the connection open while results are awaited.
    _dvm: Arc<Dvm>,
}

#[pymethods]
impl PyResults {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyTaskResult>> {
        // Never block on the lock with the GIL held: the holder needs the GIL to go on.
        let mut s = self.stream.try_lock().map_err(|_| {
            PyRuntimeError::new_err("these results are being read by another thread")
        })?;
        let mut next = s.next();
        match wait(py, &self.rt, &mut next)? {
            Some(r) => result(r).map(Some),
            None => Ok(None),
        }
    }
}

#[pymethods]
impl PyDvm {
    /// Runs one task and returns its result (blocking; other Python threads run meanwhile).
    #[pyo3(signature = (task, *, index = 0, timeout = None))]
    fn submit(
        &self,
        py: Python<'_>,
        task: &Bound<'_, PyAny>,
        index: usize,
        timeout: Option<f64>,
    ) -> PyResult<PyTaskResult> {
        let t = crate::task(task, index, timeout)?
            .ok_or_else(|| PyValueError::new_err("the task has no command"))?;
        let dvm = self.dvm()?;
        let rt = runtime()?;
        let mut fut = Box::pin(dvm.submit(t));
        result(wait(py, &rt, &mut fut)?)
    }

    /// Runs every task of `tasks` (each a command line or a list of words; an open task file
    /// works), at most `max_in_flight` at once, and yields each one's result in the order they
    /// end; `timeout` (seconds) applies to the tasks that give none.
    #[pyo3(signature = (tasks, *, max_in_flight = 16, timeout = None))]
    fn map(
        &self,
        tasks: &Bound<'_, PyAny>,
        max_in_flight: usize,
        timeout: Option<f64>,
    ) -> PyResult<PyResults> {
        // Blank and comment lines are no tasks: an open task file reads as `prrte-k8s submit`
        // reads it, with the same indices.
        let mut list = Vec::new();
        for item in tasks.try_iter()? {
            if let Some(t) = crate::task(&item?, list.len(), timeout)? {
                list.push(t);
            }
        }
        let dvm = self.dvm()?;
        let stream: Results = Box::pin(dvm.map(list, max_in_flight));
        Ok(PyResults {
            stream: Mutex::new(stream),
            rt: runtime()?,
            _dvm: dvm,
        })
    }

    /// Tasks spawned whose end is not known yet.
    #[getter]
    fn running(&self) -> PyResult<usize> {
        Ok(self.dvm()?.running())
    }

    /// Closes the connection (once the results being read are done); the DVM ends tasks still
    /// running, as a lost tool's.
    fn close(&self) {
        if let Ok(mut g) = self.dvm.lock() {
            g.take();
        }
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) {
        self.close();
    }
}

/// Connects to the job's DVM: found as `prrte-k8s prun` finds it (the URI file the agent
/// publishes, `$PRRTE_K8S_DVM_URI_FILE`), or at `uri`. With `output`, each task's standard
/// output and error go to `output/<index>.out` and `.err` instead of this process's.
#[pyfunction]
#[pyo3(signature = (uri = None, *, output = None, uri_file = None, libpmix = None))]
fn connect(
    py: Python<'_>,
    uri: Option<String>,
    output: Option<std::path::PathBuf>,
    uri_file: Option<std::path::PathBuf>,
    libpmix: Option<std::path::PathBuf>,
) -> PyResult<PyDvm> {
    if let Some(dir) = &output {
        std::fs::create_dir_all(dir).map_err(|e| {
            PyRuntimeError::new_err(format!("cannot create {}: {e}", dir.display()))
        })?;
    }
    let opts = Options {
        uri,
        uri_file,
        libpmix,
        output,
    };
    let dvm = py
        .detach(|| Dvm::connect_with(opts))
        .map_err(|e| PyConnectionError::new_err(e.to_string()))?;
    Ok(PyDvm {
        dvm: Mutex::new(Some(Arc::new(dvm))),
    })
}

#[pymodule]
#[pyo3(name = "prrte_k8s")]
fn prrte_k8s_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_class::<PyDvm>()?;
    m.add_class::<PyResults>()?;
    m.add_class::<PyTaskResult>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
