//! Many tasks through one DVM (`prrte-k8s submit`): the task list, the results file and what a
//! resumed run still has to do, and when the next task may be spawned. The PMIx tool connection
//! itself is `prrte-k8s-pmix-tool`'s.

mod admission;
mod results;
mod tasks;
mod timing;

pub use admission::{Admission, NoRoom};
pub use results::{completed_indices, exit_label, failed_summary, Exit, TaskResult};
pub use tasks::{parse_tasks, TaskLine, TaskParseError};
pub use timing::{quantile, PhaseTimes};
