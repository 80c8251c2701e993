//! Many tasks through one DVM: the task list, the results file and what a resumed run still has
//! to do, when the next task may be spawned and where a task's time went, and [`Dvm`], the
//! library `prrte-k8s submit` and the Python module (`adapter/python/`) are built on: one PMIx
//! tool connection (`prrte-k8s-pmix-tool`'s), a future per task.

mod admission;
mod dvm;
mod engine;
mod error;
mod find;
mod results;
mod tasks;
mod timing;

pub use admission::{Admission, NoRoom};
pub use dvm::{Dvm, Options};
pub use error::Error;
pub use find::{configured_prefix, dvm_uri_file, libpmix, read_dvm_uri, DvmUriError};
pub use results::{completed_indices, exit_label, failed_summary, Exit, TaskResult};
pub use tasks::{parse_tasks, TaskLine, TaskParseError};
pub use timing::{quantile, PhaseTimes};
