//! What the benchmarks measure prrte-k8s against, beside the launch benchmark's binary
//! (`prrte-k8s-bench`, in `src/bin/prrte-k8s-bench/`): the baselines of a launch, a real sshd in
//! every pod (`sshd`) and the lower bound that enters the pods' namespaces directly (`nsexec`),
//! and the agent channel's cryptography timed alone per connection (`channel_cost`, also used
//! by `make bench-scale`).

pub mod channel_cost;
pub mod nsexec;
pub mod sshd;
