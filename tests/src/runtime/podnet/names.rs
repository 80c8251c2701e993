//! The names and paths podnet uses on the host, and the pods' environment defaults.

/// Every bridge, veth, network namespace and state directory made here starts with this.
pub const NAME_PREFIX: &str = "pk8s";

/// Host directory for the lock file and the per-pod state directories.
pub const STATE_DIR: &str = "/run/prrte-k8s-sandbox";

/// `HOME` given to pods whose environment does not set one.
pub const DEFAULT_HOME: &str = "/root";

/// `PATH` used to run the host tools themselves.
pub(super) const SYSTEM_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
