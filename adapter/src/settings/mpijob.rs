//! The MPIJob a job was made for, as the controller tells the job's launcher: [`MPIJOB_ENV`]
//! holds its name and uid ([`MpiJobRef`]). The controller sets it in the pods it renders
//! (`crate::manifest`); the launcher reads it to record the `DaemonsUp` Event on the MPIJob
//! (`crate::launch::daemons_up`).

/// The launcher's environment variable naming the MPIJob the job was made for, as
/// `NAME:UID` (a Kubernetes name holds no `:`). Set by the controller only.
pub const MPIJOB_ENV: &str = "PRRTE_K8S_MPIJOB";

/// The MPIJob a job was made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpiJobRef {
    pub name: String,
    pub uid: String,
}

impl MpiJobRef {
    /// The value of [`MPIJOB_ENV`].
    pub fn env_value(&self) -> String {
        format!("{}:{}", self.name, self.uid)
    }

    /// The MPIJob named by a value of [`MPIJOB_ENV`]; None if it is not `NAME:UID` with both
    /// parts non-empty.
    pub fn parse(value: &str) -> Option<MpiJobRef> {
        let (name, uid) = value.trim().split_once(':')?;
        (!name.is_empty() && !uid.is_empty() && !uid.contains(':')).then(|| MpiJobRef {
            name: name.to_string(),
            uid: uid.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_the_mpijob_both_ways() {
        let r = MpiJobRef {
            name: "pi".into(),
            uid: "0b1c-2d".into(),
        };
        assert_eq!(r.env_value(), "pi:0b1c-2d");
        assert_eq!(MpiJobRef::parse(&r.env_value()), Some(r));
        for bad in ["", "pi", "pi:", ":uid", "pi:a:b"] {
            assert_eq!(MpiJobRef::parse(bad), None, "{bad:?}");
        }
    }
}
