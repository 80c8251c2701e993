//! Many tasks through one DVM (`prrte-k8s submit`): the task list, the results file and what a
//! resumed run still has to do. The PMIx tool connection itself is `prrte-k8s-pmix-tool`'s.

mod results;
mod tasks;
mod timing;

pub use results::{completed_indices, exit_label, failed_summary, Exit, TaskResult};
pub use tasks::{parse_tasks, TaskLine, TaskParseError};
pub use timing::{quantile, PhaseTimes};
